// GEMM through cuBLAS, and the Conv1D-style matmul (weight stored (in, out)) with our own bias
// kernels.
//
// Row-major on column-major cuBLAS: a row-major (r,c) matrix with row stride ld is, read
// column-major, its (c,r) transpose with leading dimension ld. So row-major c = op(a) op(b) is
// computed as column-major c^T = op(b)^T op(a)^T: cuBLAS gets b first, then a, and (n, m, k).
//
// Precision (MatmulPrecision, backend.h): kFp32 runs CUBLAS_COMPUTE_32F; kTf32 runs
// CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores, inputs rounded to TF32); kBf16 converts a and b to
// bf16 in scratch buffers and runs cublasGemmEx on CUDA_R_16BF inputs. Accumulation and c are
// fp32 in every mode.
#ifndef DTRAIN_KERNELS_CUDA_MATMUL_CUH_
#define DTRAIN_KERNELS_CUDA_MATMUL_CUH_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cuda/cublas_library.h"

namespace dtrain::kernels::cuda {

// Device scratch owned by the backend, grown on demand. A buffer may be reused by the next Get
// of the same slot; the stream orders that reuse after the work that read it.
class DeviceScratch {
 public:
  virtual ~DeviceScratch() = default;
  // At least `bytes` of device memory for `slot`: 0 and 1 hold bf16 GEMM operands, 2 the partial
  // sums of column_sums.cuh.
  virtual absl::StatusOr<void*> Get(int slot, size_t bytes) = 0;
};

// What every GEMM needs: a cuBLAS handle bound to `stream`, the precision, and (for kBf16) the
// scratch that holds the bf16 copies of the inputs.
struct GemmContext {
  const CublasLibrary* cublas = nullptr;  // loaded (cublas_library.h)
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  MatmulPrecision precision = MatmulPrecision::kFp32;
  DeviceScratch* scratch = nullptr;
};

// The cuBLAS compute type for fp32 inputs in `precision` (kBf16 maps to
// CUBLAS_COMPUTE_32F_FAST_16BF, which rounds fp32 inputs to bf16 inside cuBLAS; the attention
// GEMMs use it, as they read fp32 activations in place).
cublasComputeType_t Fp32InputComputeType(MatmulPrecision precision);

// Row-major: c (m,n) = alpha * op(a) (m,k) @ op(b) (k,n) + beta * c, op(x) = x or x^T; lda/ldb/ldc
// are row strides as stored. beta = 0 overwrites c (NaNs in c do not propagate); k = 0 gives
// c = beta * c. Errors: InvalidArgument as kernels/cpu/gemm.h (null pointers, negative sizes,
// leading dimensions below the stored row width or 1).
absl::Status Gemm(const GemmContext& ctx, bool trans_a, bool trans_b, int m, int n, int k,
                  float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc);

// out (N,OC) = inp (N,C) @ weight (C,OC) + bias (OC); bias may be null.
absl::Status MatmulForward(const GemmContext& ctx, float* out, const float* inp,
                           const float* weight, const float* bias, int N, int C, int OC);

// dinp (N,C) = dout (N,OC) @ weight^T, added into dinp when `accumulate`.
absl::Status MatmulBackwardInput(const GemmContext& ctx, float* dinp, const float* dout,
                                 const float* weight, int N, int C, int OC, bool accumulate);

// dweight (C,OC) += inp^T @ dout; dbias (OC) += sum_n dout (null dbias skips it). The bias
// gradient is a deterministic column sum (one block per 32 columns, fixed order, no atomics).
absl::Status MatmulBackwardWeight(const GemmContext& ctx, float* dweight, float* dbias,
                                  const float* dout, const float* inp, int N, int C, int OC);

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_MATMUL_CUH_
