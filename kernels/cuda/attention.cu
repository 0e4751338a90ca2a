#include "kernels/cuda/attention.cuh"

#include <cmath>
#include <cstdint>

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/reduce.cuh"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kBlock = 256;  // 8 warps: 8 rows per block
constexpr int kRowsPerBlock = kBlock / kWarpSize;

// In place on att (rows, T), row r = query position i = r % T of some (b, h); entries already
// scaled by 1/sqrt(hs). Row i: softmax over j <= i, exactly 0 for j > i.
__global__ void CausalSoftmaxKernel(float* att, int64_t rows, int T) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  const int i = static_cast<int>(row % T);
  float* a = att + row * T;

  float max_val = -INFINITY;
  for (int j = lane; j <= i; j += kWarpSize) max_val = fmaxf(max_val, a[j]);
  max_val = WarpReduceMax(max_val);
  float sum = 0.0f;
  for (int j = lane; j <= i; j += kWarpSize) {
    const float e = expf(a[j] - max_val);
    a[j] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / WarpReduceSum(sum);
  for (int j = lane; j < T; j += kWarpSize) a[j] = j <= i ? a[j] * inv_sum : 0.0f;
}

// In place on datt (rows, T): dpre[j] = att[j] * (datt[j] - sum_{j' <= i} att[j'] datt[j']) for
// j <= i, 0 above the diagonal (the 1/sqrt(hs) of the forward is applied by the next GEMMs).
__global__ void CausalSoftmaxBackwardKernel(float* datt, const float* att, int64_t rows, int T) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int i = static_cast<int>(row % T);
  const float* a = att + row * T;
  float* d = datt + row * T;

  float dot = 0.0f;
  for (int j = lane; j <= i; j += kWarpSize) dot += a[j] * d[j];
  dot = WarpReduceSum(dot);
  for (int j = lane; j < T; j += kWarpSize) d[j] = j <= i ? a[j] * (d[j] - dot) : 0.0f;
}

// Column-major, beta = 0: c_h = alpha * op(a_h) @ op(b_h) for h < batch, x_h = x + h * stride_x.
absl::Status BatchedGemm(const GemmContext& ctx, cublasOperation_t op_a, cublasOperation_t op_b,
                         int m, int n, int k, float alpha, const float* a, int lda,
                         int64_t stride_a, const float* b, int ldb, int64_t stride_b, float* c,
                         int ldc, int64_t stride_c, int batch) {
  const float beta = 0.0f;
  CUBLAS_RETURN_IF_ERROR(ctx.cublas->GemmStridedBatchedEx(
      ctx.handle, op_a, op_b, m, n, k, &alpha, a, CUDA_R_32F, lda, stride_a, b, CUDA_R_32F, ldb,
      stride_b, &beta, c, CUDA_R_32F, ldc, stride_c, batch, Fp32InputComputeType(ctx.precision),
      CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::Status CheckArgs(ArgCheck& check, int B, int T, int C, int NH) {
  check.NonNegative("B", B).NonNegative("T", T).Positive("C", C).Positive("NH", NH);
  if (check.ok()) check.That(C % NH == 0, absl::StrCat("C=", C, " is not a multiple of NH=", NH));
  check.GridFits(CeilDiv(static_cast<int64_t>(B) * NH * T, kRowsPerBlock));
  return check.status();
}

}  // namespace

// Per batch element b and head h (row-major, hs = C/NH, scale = 1/sqrt(hs)):
//   att_h (T,T) = scale * q_h (T,hs) @ k_h^T      cuBLAS: (T,T,hs), k^T-first, op T/N
//   softmax rows with the causal mask, in place
//   out_h (T,hs) = att_h (T,T) @ v_h (T,hs)        cuBLAS: (hs,T,T), v first, op N/N
absl::Status AttentionForward(const GemmContext& ctx, float* out, float* att, const float* qkv,
                              int B, int T, int C, int NH) {
  ArgCheck check("AttentionForward");
  check.NotNull("out", out).NotNull("att", att).NotNull("qkv", qkv);
  RETURN_IF_ERROR(CheckArgs(check, B, T, C, NH));
  if (B == 0 || T == 0) return absl::OkStatus();
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const int64_t TT = static_cast<int64_t>(T) * T;
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + static_cast<int64_t>(b) * T * 3 * C;
    const float* k = q + C;
    float* att_b = att + static_cast<int64_t>(b) * NH * TT;
    RETURN_IF_ERROR(BatchedGemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, 3 * C, hs, q,
                                3 * C, hs, att_b, T, TT, NH));
  }
  const int64_t rows = static_cast<int64_t>(B) * NH * T;
  CausalSoftmaxKernel<<<CeilDiv(rows, kRowsPerBlock), kBlock, 0, ctx.stream>>>(att, rows, T);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  for (int b = 0; b < B; ++b) {
    const float* v = qkv + static_cast<int64_t>(b) * T * 3 * C + 2 * C;
    const float* att_b = att + static_cast<int64_t>(b) * NH * TT;
    float* out_b = out + static_cast<int64_t>(b) * T * C;
    RETURN_IF_ERROR(BatchedGemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, 3 * C, hs, att_b,
                                T, TT, out_b, C, hs, NH));
  }
  return absl::OkStatus();
}

// Per b and h, with dpre the gradient of the scaled scores:
//   datt_h (T,T) = dout_h (T,hs) @ v_h^T            into scratch
//   dv_h (T,hs) = att_h^T @ dout_h
//   dpre = softmax backward of datt, in place in scratch (zero above the diagonal)
//   dq_h (T,hs) = scale * dpre (T,T) @ k_h (T,hs)
//   dk_h (T,hs) = scale * dpre^T @ q_h (T,hs)
absl::Status AttentionBackward(const GemmContext& ctx, float* dqkv, float* scratch,
                               const float* dout, const float* qkv, const float* att, int B, int T,
                               int C, int NH) {
  ArgCheck check("AttentionBackward");
  check.NotNull("dqkv", dqkv).NotNull("scratch", scratch).NotNull("dout", dout);
  check.NotNull("qkv", qkv).NotNull("att", att);
  RETURN_IF_ERROR(CheckArgs(check, B, T, C, NH));
  if (B == 0 || T == 0) return absl::OkStatus();
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const int64_t TT = static_cast<int64_t>(T) * T;
  for (int b = 0; b < B; ++b) {
    const float* v = qkv + static_cast<int64_t>(b) * T * 3 * C + 2 * C;
    const float* dout_b = dout + static_cast<int64_t>(b) * T * C;
    const float* att_b = att + static_cast<int64_t>(b) * NH * TT;
    float* datt_b = scratch + static_cast<int64_t>(b) * NH * TT;
    float* dv = dqkv + static_cast<int64_t>(b) * T * 3 * C + 2 * C;
    RETURN_IF_ERROR(BatchedGemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, 3 * C, hs, dout_b,
                                C, hs, datt_b, T, TT, NH));
    RETURN_IF_ERROR(BatchedGemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dout_b, C, hs, att_b,
                                T, TT, dv, 3 * C, hs, NH));
  }
  const int64_t rows = static_cast<int64_t>(B) * NH * T;
  CausalSoftmaxBackwardKernel<<<CeilDiv(rows, kRowsPerBlock), kBlock, 0, ctx.stream>>>(scratch, att,
                                                                                       rows, T);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + static_cast<int64_t>(b) * T * 3 * C;
    const float* k = q + C;
    const float* dpre_b = scratch + static_cast<int64_t>(b) * NH * TT;
    float* dq = dqkv + static_cast<int64_t>(b) * T * 3 * C;
    float* dk = dq + C;
    RETURN_IF_ERROR(BatchedGemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, k, 3 * C, hs,
                                dpre_b, T, TT, dq, 3 * C, hs, NH));
    RETURN_IF_ERROR(BatchedGemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, q, 3 * C, hs,
                                dpre_b, T, TT, dk, 3 * C, hs, NH));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cuda
