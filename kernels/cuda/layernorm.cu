#include "kernels/cuda/layernorm.cuh"

#include <cstdint>

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/reduce.cuh"

namespace dtrain::kernels::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowBlock = 256;  // 8 warps: 8 rows per block
constexpr int kRowsPerBlock = kRowBlock / kWarpSize;

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

// dweight += dout * norm, dbias += dout, summed over rows (AddColumnSums).
struct LayerNormParamTerms {
  const float* dout;
  const float* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float* acc) const {
    const int64_t i = static_cast<int64_t>(n) * C + c;
    const float d = dout[i];
    acc[0] += d * ((inp[i] - mean[n]) * rstd[n]);
    acc[1] += d;
  }
};

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
                               const float* rstd, int N, int C, DeviceScratch* scratch,
                               cudaStream_t stream) {
  ArgCheck check("LayerNormBackward");
  check.NotNull("dinp", dinp).NotNull("dweight", dweight).NotNull("dbias", dbias);
  check.NotNull("dout", dout).NotNull("inp", inp).NotNull("weight", weight);
  check.NotNull("mean", mean).NotNull("rstd", rstd);
  check.NonNegative("N", N).Positive("C", C);
  if (!check.ok() || N == 0) return check.status();
  // Parameter gradients first: they read dout and inp only.
  RETURN_IF_ERROR(AddColumnSums<2>({dweight, dbias}, N, C,
                                   LayerNormParamTerms{dout, inp, mean, rstd, C}, scratch, stream));
  LayerNormBackwardInputKernel<<<CeilDiv(N, kRowsPerBlock), kRowBlock, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cuda
