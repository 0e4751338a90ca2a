// The cpu-staging backend (--device=cpu-staging): the CPU backend's ops, with device memory that
// nobody but the backend may touch and copies that complete asynchronously. It exists to prove,
// without a GPU, that the code driving a GPU rank stages every tensor it hands to the network or
// the disk: a dereference of device memory outside the backend crashes (SIGSEGV), and a host
// buffer read before its copy's event has completed holds stale bytes.
//
// Protection: each Allocate maps its pages twice (a shared anonymous mapping and an mremap of
// it): the pointer the caller gets is a PROT_NONE view, always; the backend's ops run on the
// other, readable and writable, view, translating every pointer argument to the same byte there.
// So no code outside the backend reads or writes device memory at any time, on any thread, and
// an op costs a lookup, not a system call (an mprotect per argument and op, the first design,
// spent 80 % of the staging tests' time in mprotect and its TLB shootdowns). A pointer argument
// that lies in no allocation is InvalidArgument naming the op (host memory passed where device
// memory is expected, which a GPU would also reject or crash on).
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
