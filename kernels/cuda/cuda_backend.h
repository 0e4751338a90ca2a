// The CUDA implementation of kernels/backend.h: one GPU, one stream, one cuBLAS handle bound to
// it. Ops are the launchers of the .cuh files in this folder, enqueued on the stream in call
// order; only CopyToHost, SquaredNorm and Synchronize wait for the GPU.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Backend> gpu, CreateCudaBackend(0));
//   RETURN_IF_ERROR(gpu->SetMatmulPrecision(MatmulPrecision::kTf32));  // fp32 until then
//
// Memory: Allocate is stream-ordered (cudaMallocAsync + cudaMemsetAsync on the backend's stream,
// where the GPU supports memory pools; cudaMalloc + cudaMemset otherwise), so a buffer may be
// used by ops right away and is freed after the ops enqueued before Free. CopyToDevice from
// pageable memory returns once the source has been staged, so the host buffer may be reused at
// once; from pinned memory the copy is asynchronous and the buffer must outlive the next
// Synchronize.
//
// Staging: a second stream (the copy stream) runs CopyToHostAsync / CopyToDeviceAsync
// (cudaMemcpyAsync), AllocatePinned is cudaHostAlloc, events are cudaEvent_t (timing disabled);
// Synchronize waits for both streams.
//
// Every call makes the backend's GPU current on the calling thread (cudaSetDevice), so several
// backends on different GPUs may be driven from one thread. Ops are enqueued from one thread;
// the staging calls (pinned memory, events, async copies) may come from any thread at once, as
// the CUDA runtime allows (the gradient sync thread stages while the training thread computes).
#ifndef DTRAIN_KERNELS_CUDA_CUDA_BACKEND_H_
#define DTRAIN_KERNELS_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace dtrain::kernels {

// Number of CUDA GPUs visible to this process; 0 when there is no driver, no GPU, or any other
// error. Never aborts.
int CudaDeviceCount();

// A backend on GPU `ordinal`, its GEMMs in fp32 until SetMatmulPrecision says otherwise.
// Errors: FailedPrecondition "no CUDA GPU found: cudaGetDeviceCount returned ..." when there is
// no usable GPU; InvalidArgument when ordinal is outside [0, count), naming the count; Internal
// or ResourceExhausted when creating the stream, the cuBLAS handle or scratch memory fails.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int ordinal);

}  // namespace dtrain::kernels

#endif  // DTRAIN_KERNELS_CUDA_CUDA_BACKEND_H_
