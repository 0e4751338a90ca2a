// GELU (tanh approximation) on the GPU; the math is kernels/common/elementwise.h's GeluTanh and
// GeluTanhGrad, the same functions the CPU backend runs.
#ifndef DTRAIN_KERNELS_CUDA_GELU_CUH_
#define DTRAIN_KERNELS_CUDA_GELU_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace dtrain::kernels::cuda {

// out (n) = gelu(inp (n)). out may equal inp.
absl::Status GeluForward(float* out, const float* inp, int64_t n, cudaStream_t stream);

// dinp (n) = gelu'(inp) * dout, overwritten. dinp may equal dout.
absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n,
                          cudaStream_t stream);

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_GELU_CUH_
