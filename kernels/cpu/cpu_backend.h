// The CPU backend: host memory, OpenBLAS sgemm, and the ops in this folder (one file pair per
// op; CpuBackend only forwards to them). It is the readable reference for the CUDA backend.
//
// Ops run synchronously on the calling thread, each spread over the backend's OpenMP threads;
// Synchronize() has nothing to wait for. "Device" pointers are 64-byte-aligned host memory.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Backend> cpu, CreateCpuBackend(/*num_threads=*/2));
#ifndef DTRAIN_KERNELS_CPU_CPU_BACKEND_H_
#define DTRAIN_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace dtrain::kernels {

// num_threads: OpenMP threads per op; 0 = every core this process may run on.
// Also sets OpenBLAS to one thread, process-wide (kernels/cpu/gemm.h says why).
// Errors: InvalidArgument for num_threads < 0.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(int num_threads);

}  // namespace dtrain::kernels

#endif  // DTRAIN_KERNELS_CPU_CPU_BACKEND_H_
