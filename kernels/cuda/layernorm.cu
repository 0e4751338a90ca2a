#include "kernels/cuda/layernorm.cuh"

#include <cstdint>

#include "kernels/common/arg_check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/reduce.cuh"

namespace dtrain::kernels::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowBlock = 256;  // 8 warps: 8 rows per block
constexpr int kRowsPerBlock = kRowBlock / kWarpSize;
constexpr int kColumnRows = 16;  // column-sum blocks: (32 columns, 16 row lanes)

// One warp per row.
__global__ void LayerNormForwardKernel(float* out, float* mean, float* rstd, const float* inp,
                                       const float* weight, const float* bias, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warps leave together
  const float* x = inp + static_cast<int64_t>(row) * C;
  float* o = out + static_cast<int64_t>(row) * C;

  float sum = 0.0f;
  for (int i = lane; i < C; i += kWarpSize) sum += x[i];
  const float m = WarpReduceSum(sum) / C;
  float sum_sq = 0.0f;
  for (int i = lane; i < C; i += kWarpSize) {
    const float d = x[i] - m;
    sum_sq += d * d;
  }
  const float s = rsqrtf(WarpReduceSum(sum_sq) / C + kEps);
  for (int i = lane; i < C; i += kWarpSize) o[i] = (x[i] - m) * s * weight[i] + bias[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp, one warp per row:
//   dnorm = weight * dout
//   dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd
__global__ void LayerNormBackwardInputKernel(float* dinp, const float* dout, const float* inp,
                                             const float* weight, const float* mean,
                                             const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const int64_t offset = static_cast<int64_t>(row) * C;
  const float* x = inp + offset;
  const float* d = dout + offset;
  const float m = mean[row];
  const float s = rstd[row];

  float dnorm_sum = 0.0f;
  float dnorm_norm_sum = 0.0f;
  for (int i = lane; i < C; i += kWarpSize) {
    const float dnorm = weight[i] * d[i];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * ((x[i] - m) * s);
  }
  const float dnorm_mean = WarpReduceSum(dnorm_sum) / C;
  const float dnorm_norm_mean = WarpReduceSum(dnorm_norm_sum) / C;
  float* di = dinp + offset;
  for (int i = lane; i < C; i += kWarpSize) {
    const float norm = (x[i] - m) * s;
    di[i] += (weight[i] * d[i] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// dweight, dbias: block (32, kColumnRows) owns 32 columns; row lane y sums rows y, y+16, ...,
// then row 0 of the block adds the 16 partial sums in order. Deterministic.
__global__ void LayerNormBackwardParamsKernel(float* dweight, float* dbias, const float* dout,
                                              const float* inp, const float* mean,
                                              const float* rstd, int N, int C) {
  __shared__ float dw_part[kColumnRows][kWarpSize];
  __shared__ float db_part[kColumnRows][kWarpSize];
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  float dw = 0.0f;
  float db = 0.0f;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kColumnRows) {
      const int64_t i = static_cast<int64_t>(n) * C + c;
      const float d = dout[i];
      db += d;
      dw += d * ((inp[i] - mean[n]) * rstd[n]);
    }
  }
  dw_part[threadIdx.y][threadIdx.x] = dw;
  db_part[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kColumnRows; ++y) {
      dw += dw_part[y][threadIdx.x];
      db += db_part[y][threadIdx.x];
    }
    dweight[c] += dw;
    dbias[c] += db;
  }
}

}  // namespace

absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C,
                              cudaStream_t stream) {
  ArgCheck check("LayerNormForward");
  check.NotNull("out", out).NotNull("mean", mean).NotNull("rstd", rstd).NotNull("inp", inp);
  check.NotNull("weight", weight).NotNull("bias", bias);
  check.NonNegative("N", N).Positive("C", C);
  if (!check.ok() || N == 0) return check.status();
  LayerNormForwardKernel<<<CeilDiv(N, kRowsPerBlock), kRowBlock, 0, stream>>>(out, mean, rstd, inp,
                                                                              weight, bias, N, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C, cudaStream_t stream) {
  ArgCheck check("LayerNormBackward");
  check.NotNull("dinp", dinp).NotNull("dweight", dweight).NotNull("dbias", dbias);
  check.NotNull("dout", dout).NotNull("inp", inp).NotNull("weight", weight);
  check.NotNull("mean", mean).NotNull("rstd", rstd);
  check.NonNegative("N", N).Positive("C", C);
  if (!check.ok() || N == 0) return check.status();
  // Parameter gradients first: they read dout and inp only.
  const dim3 column_block(kWarpSize, kColumnRows);
  LayerNormBackwardParamsKernel<<<CeilDiv(C, kWarpSize), column_block, 0, stream>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  LayerNormBackwardInputKernel<<<CeilDiv(N, kRowsPerBlock), kRowBlock, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cuda
