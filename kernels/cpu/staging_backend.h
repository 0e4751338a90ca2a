// The cpu-staging backend (--device=cpu-staging): the CPU backend's ops, with device memory that
// nobody but the backend may touch and copies that complete asynchronously. It exists to prove,
// without a GPU, that the code driving a GPU rank stages every tensor it hands to the network or
// the disk: a dereference of device memory outside the backend crashes (SIGSEGV), and a host
// buffer read before its copy's event has completed holds stale bytes.
//
// Protection: each Allocate is its own mmap, kept PROT_NONE. An op opens a window on the
// allocations its pointer arguments fall in (PROT_READ|PROT_WRITE) for the duration of the op
// and closes it after; windows are counted per allocation under the backend's mutex, so ops on
// several threads (the training thread, the gradient sync thread, the copy thread) may hold
// windows at once, and the last to close one restores PROT_NONE. Limits: while a window is
// open on an allocation, any thread can read it without crashing (the check is per allocation
// and per call, not per access); a pointer argument that lies in no allocation is
// InvalidArgument naming the op (host memory passed where device memory is expected, which a
// GPU would also reject or crash on).
//
// Streams: compute ops run on the calling thread as on the CPU backend (an event recorded on
// kCompute is complete at once; StreamWaitEvent(kCompute, e) blocks the caller until e has
// completed). The copy stream is a thread running copies and event marks in order; the host
// side of its copies must come from AllocatePinned. Synchronize waits for the copy thread too.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, CreateStagingCpuBackend(1));
//   ASSIGN_OR_RETURN(void* d, b->Allocate(64));
//   *static_cast<float*>(d) = 1;  // SIGSEGV: device memory
#ifndef DTRAIN_KERNELS_CPU_STAGING_BACKEND_H_
#define DTRAIN_KERNELS_CPU_STAGING_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace dtrain::kernels {

// num_threads as CreateCpuBackend. Errors: those of CreateCpuBackend.
absl::StatusOr<std::unique_ptr<Backend>> CreateStagingCpuBackend(int num_threads);

}  // namespace dtrain::kernels

#endif  // DTRAIN_KERNELS_CPU_STAGING_BACKEND_H_
