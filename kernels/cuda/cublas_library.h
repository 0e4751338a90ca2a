// cuBLAS, opened when the first CUDA backend is created instead of when the process starts.
//
// libcublas pulls in libcublasLt (540 MB), whose static constructors register its kernels
// whether or not the process ever uses a GPU: linked normally, every process of a binary that
// contains the CUDA backend paid about 0.5 s of CPU at start (`dtrain-worker --version`: 0.51 s,
// the coordinator's 0.05 s; perf: libcublasLt's initializers and the kernel's page faults).
// Every dtrain worker binary contains the backend where the build found CUDA, and most of their
// processes (CPU workers, dtrain-local on a laptop, the tests) never create it. The CUDA runtime
// (libcudart) stays linked: it is cheap to load and answers how many GPUs there are.
//
//   ASSIGN_OR_RETURN(const CublasLibrary* cublas, LoadCublas());
//   CUBLAS_RETURN_IF_ERROR(cublas->Create(&handle));
#ifndef DTRAIN_KERNELS_CUDA_CUBLAS_LIBRARY_H_
#define DTRAIN_KERNELS_CUDA_CUBLAS_LIBRARY_H_

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace dtrain::kernels::cuda {

// The entry points the backend calls (cublas_api.h's C declarations; cublasGemmEx also has C++
// overloads there, hence the spelled-out types).
struct CublasLibrary {
  cublasStatus_t (*Create)(cublasHandle_t* handle);
  cublasStatus_t (*Destroy)(cublasHandle_t handle);
  cublasStatus_t (*SetStream)(cublasHandle_t handle, cudaStream_t stream);
  cublasStatus_t (*GemmEx)(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const void* alpha,
                           const void* A, cudaDataType Atype, int lda, const void* B,
                           cudaDataType Btype, int ldb, const void* beta, void* C,
                           cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                           cublasGemmAlgo_t algo);
  cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, long long strideA, const void* B,
                                         cudaDataType Btype, int ldb, long long strideB,
                                         const void* beta, void* C, cudaDataType Ctype, int ldc,
                                         long long strideC, int batchCount,
                                         cublasComputeType_t computeType, cublasGemmAlgo_t algo);
  const char* (*GetStatusName)(cublasStatus_t status);
  const char* (*GetStatusString)(cublasStatus_t status);
};

// The name the library is opened by: libcublas.so.<the major version of the headers built
// against>, found on the library path (the binaries' RUNPATH names the CUDA toolkit's lib64).
const char* CublasLibraryName();

// Opens the library and resolves every entry point on the first call (thread-safe); later calls
// return the same table, or the same error: FailedPrecondition naming the library and what the
// loader said.
absl::StatusOr<const CublasLibrary*> LoadCublas();

// The table once LoadCublas succeeded, else nullptr (error messages use it when they can).
const CublasLibrary* LoadedCublas();

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_CUBLAS_LIBRARY_H_
