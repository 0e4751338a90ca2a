// CUDA and cuBLAS errors as absl::Status, and the grid arithmetic every launcher uses.
//
//   CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
//   CUBLAS_RETURN_IF_ERROR(cublas->SetStream(handle, stream));
//   GeluForwardKernel<<<CeilDiv(n, kBlock), kBlock, 0, stream>>>(out, inp, n);
//   CUDA_RETURN_IF_ERROR(cudaGetLastError());  // the launch error, if any
//
// The message names the failed expression, the error's name and its description:
//   "cudaMalloc(&ptr, size) failed: cudaErrorMemoryAllocation (out of memory) [x.cc:61]"
// Out-of-memory becomes ResourceExhausted; every other error is Internal.
#ifndef DTRAIN_KERNELS_CUDA_CUDA_CHECK_H_
#define DTRAIN_KERNELS_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/cublas_library.h"

namespace dtrain::kernels::cuda {

// Also clears the runtime's last-error slot (for errors that are not sticky), so a failed call
// here is not reported again by the next launch's cudaGetLastError().
inline absl::Status CudaErrorToStatus(cudaError_t error, absl::string_view expr,
                                      absl::string_view file, int line) {
  (void)cudaGetLastError();
  std::string message = absl::StrCat(expr, " failed: ", cudaGetErrorName(error), " (",
                                     cudaGetErrorString(error), ") [", file, ":", line, "]");
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// The status's name and description come from the loaded library (cublas_library.h); before it
// is loaded, its number.
inline absl::Status CublasErrorToStatus(cublasStatus_t error, absl::string_view expr,
                                        absl::string_view file, int line) {
  const CublasLibrary* cublas = LoadedCublas();
  std::string message =
      cublas == nullptr ? absl::StrCat(expr, " failed: cuBLAS status ", static_cast<int>(error),
                                       " [", file, ":", line, "]")
                        : absl::StrCat(expr, " failed: ", cublas->GetStatusName(error), " (",
                                       cublas->GetStatusString(error), ") [", file, ":", line, "]");
  if (error == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// ceil(a / b) for a >= 0, b > 0: the number of blocks of `b` threads covering `a` items.
constexpr int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace dtrain::kernels::cuda

#define CUDA_RETURN_IF_ERROR(expr)                                                           \
  do {                                                                                       \
    const cudaError_t dtrain_cuda_error_ = (expr);                                           \
    if (dtrain_cuda_error_ != cudaSuccess) {                                                 \
      return ::dtrain::kernels::cuda::CudaErrorToStatus(dtrain_cuda_error_, #expr, __FILE__, \
                                                        __LINE__);                           \
    }                                                                                        \
  } while (0)

#define CUBLAS_RETURN_IF_ERROR(expr)                                                             \
  do {                                                                                           \
    const cublasStatus_t dtrain_cublas_error_ = (expr);                                          \
    if (dtrain_cublas_error_ != CUBLAS_STATUS_SUCCESS) {                                         \
      return ::dtrain::kernels::cuda::CublasErrorToStatus(dtrain_cublas_error_, #expr, __FILE__, \
                                                          __LINE__);                             \
    }                                                                                            \
  } while (0)

#endif  // DTRAIN_KERNELS_CUDA_CUDA_CHECK_H_
