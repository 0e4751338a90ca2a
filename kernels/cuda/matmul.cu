#include "kernels/cuda/matmul.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "common/device_scratch.h"
#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/reduce.cuh"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kBlock = 256;

__global__ void FloatToBf16Kernel(__nv_bfloat16* out, const float* inp, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(inp[i]);
}

// c (m,n), row stride ldc, = beta * c; beta = 0 writes zeros (NaN-free, as BLAS).
__global__ void ScaleMatrixKernel(float* c, int m, int n, int ldc, float beta) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(m) * n) return;
  float* x = c + (i / n) * ldc + i % n;
  *x = beta == 0.0f ? 0.0f : beta * *x;
}

// out (N,OC) += bias (OC), broadcast over rows.
__global__ void AddBiasKernel(float* out, const float* bias, int64_t N, int OC) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < N * OC) out[i] += bias[i % OC];
}

// dbias (OC) += sum_n dout (N,OC) (AddColumnSums).
struct BiasTerms {
  const float* dout;
  int OC;
  __device__ void operator()(int n, int c, float* acc) const {
    acc[0] += dout[static_cast<int64_t>(n) * OC + c];
  }
};

// Elements spanned by a row-major (rows, cols) matrix with row stride ld.
int64_t StoredElements(int rows, int cols, int ld) {
  return rows == 0 || cols == 0 ? 0 : static_cast<int64_t>(rows - 1) * ld + cols;
}

// A bf16 copy of the `n` floats at `x`, in scratch `slot`.
absl::StatusOr<const __nv_bfloat16*> ToBf16(const GemmContext& ctx, int slot, const float* x,
                                            int64_t n) {
  if (ctx.scratch == nullptr) {
    return absl::FailedPreconditionError("Gemm: kBf16 precision needs a scratch provider");
  }
  if (CeilDiv(n, kBlock) > 2147483647) {
    return absl::InvalidArgumentError("Gemm: operand too large for one bf16 conversion launch");
  }
  static_assert(sizeof(__nv_bfloat16) == kBf16OperandBytes, "plan/memory.cc counts these bytes");
  ASSIGN_OR_RETURN(void* buffer, ctx.scratch->Get(slot, n * sizeof(__nv_bfloat16)));
  auto* out = static_cast<__nv_bfloat16*>(buffer);
  FloatToBf16Kernel<<<CeilDiv(n, kBlock), kBlock, 0, ctx.stream>>>(out, x, n);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return out;
}

absl::Status AddBias(float* out, const float* bias, int N, int OC, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(N) * OC;
  if (total == 0) return absl::OkStatus();
  ArgCheck check("MatmulForward");
  RETURN_IF_ERROR(check.GridFits(CeilDiv(total, kBlock)).status());
  AddBiasKernel<<<CeilDiv(total, kBlock), kBlock, 0, stream>>>(out, bias, N, OC);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

cublasComputeType_t Fp32InputComputeType(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::kTf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MatmulPrecision::kBf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case MatmulPrecision::kFp32:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

absl::Status Gemm(const GemmContext& ctx, bool trans_a, bool trans_b, int m, int n, int k,
                  float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc) {
  ArgCheck check("Gemm");
  check.NonNegative("m", m).NonNegative("n", n).NonNegative("k", k);
  check.NotNull("a", a).NotNull("b", b).NotNull("c", c);
  check.AtLeast(trans_a ? "lda (a is (k,m))" : "lda (a is (m,k))", lda,
                std::max(1, trans_a ? m : k));
  check.AtLeast(trans_b ? "ldb (b is (n,k))" : "ldb (b is (k,n))", ldb,
                std::max(1, trans_b ? k : n));
  check.AtLeast("ldc (c is (m,n))", ldc, std::max(1, n));
  check.GridFits(CeilDiv(static_cast<int64_t>(m) * n, kBlock));
  RETURN_IF_ERROR(check.status());
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {  // c = beta * c, without asking cuBLAS about an empty product
    if (beta == 1.0f) return absl::OkStatus();
    ScaleMatrixKernel<<<CeilDiv(static_cast<int64_t>(m) * n, kBlock), kBlock, 0, ctx.stream>>>(
        c, m, n, ldc, beta);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }
  // Column-major c^T (n,m) = op(b)^T (n,k) @ op(a)^T (k,m).
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (ctx.precision == MatmulPrecision::kBf16) {
    ASSIGN_OR_RETURN(const __nv_bfloat16* a16,
                     ToBf16(ctx, 0, a, StoredElements(trans_a ? k : m, trans_a ? m : k, lda)));
    ASSIGN_OR_RETURN(const __nv_bfloat16* b16,
                     ToBf16(ctx, 1, b, StoredElements(trans_b ? n : k, trans_b ? k : n, ldb)));
    CUBLAS_RETURN_IF_ERROR(ctx.cublas->GemmEx(
        ctx.handle, op_b, op_a, n, m, k, &alpha, b16, CUDA_R_16BF, ldb, a16, CUDA_R_16BF, lda,
        &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }
  CUBLAS_RETURN_IF_ERROR(ctx.cublas->GemmEx(
      ctx.handle, op_b, op_a, n, m, k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c,
      CUDA_R_32F, ldc, Fp32InputComputeType(ctx.precision), CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::Status MatmulForward(const GemmContext& ctx, float* out, const float* inp,
                           const float* weight, const float* bias, int N, int C, int OC) {
  ArgCheck check("MatmulForward");
  check.NotNull("out", out).NotNull("inp", inp).NotNull("weight", weight);
  check.NonNegative("N", N).Positive("C", C).Positive("OC", OC);
  RETURN_IF_ERROR(check.status());
  RETURN_IF_ERROR(Gemm(ctx, false, false, N, OC, C, 1.0f, inp, C, weight, OC, 0.0f, out, OC));
  if (bias == nullptr) return absl::OkStatus();
  return AddBias(out, bias, N, OC, ctx.stream);
}

absl::Status MatmulBackwardInput(const GemmContext& ctx, float* dinp, const float* dout,
                                 const float* weight, int N, int C, int OC, bool accumulate) {
  ArgCheck check("MatmulBackwardInput");
  check.NotNull("dinp", dinp).NotNull("dout", dout).NotNull("weight", weight);
  check.NonNegative("N", N).Positive("C", C).Positive("OC", OC);
  RETURN_IF_ERROR(check.status());
  // dinp (N,C) = dout (N,OC) @ (weight (C,OC))^T.
  return Gemm(ctx, false, true, N, C, OC, 1.0f, dout, OC, weight, OC, accumulate ? 1.0f : 0.0f,
              dinp, C);
}

absl::Status MatmulBackwardWeight(const GemmContext& ctx, float* dweight, float* dbias,
                                  const float* dout, const float* inp, int N, int C, int OC) {
  ArgCheck check("MatmulBackwardWeight");
  check.NotNull("dweight", dweight).NotNull("dout", dout).NotNull("inp", inp);
  check.NonNegative("N", N).Positive("C", C).Positive("OC", OC);
  RETURN_IF_ERROR(check.status());
  // dweight (C,OC) += (inp (N,C))^T @ dout (N,OC).
  RETURN_IF_ERROR(Gemm(ctx, true, false, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, OC));
  if (dbias == nullptr || N == 0) return absl::OkStatus();
  return AddColumnSums<1>({dbias}, N, OC, BiasTerms{dout, OC}, ctx.scratch, ctx.stream);
}

}  // namespace dtrain::kernels::cuda
