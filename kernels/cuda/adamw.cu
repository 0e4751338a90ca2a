#include "kernels/cuda/adamw.cuh"

#include <algorithm>
#include <cmath>

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/common/elementwise.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/reduce.cuh"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / kWarpSize;

__global__ void AdamWKernel(float* params, const float* grads, float* m, float* v, int64_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            float grad_scale, float bias_correction1, float bias_correction2_sqrt) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  AdamWElement(&params[i], grads[i] * grad_scale, &m[i], &v[i], lr, beta1, beta2, eps, weight_decay,
               bias_correction1, bias_correction2_sqrt);
}

// Sum of a double over the block (kBlock threads); thread 0 gets the result.
__device__ double BlockReduceSum(double value) {
  __shared__ double warp_sums[kWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  value = WarpReduceSum(value);
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  value = 0.0;
  if (warp == 0) {
    value = WarpReduceSum(lane < kWarps ? warp_sums[lane] : 0.0);
  }
  return value;
}

// partials[block] = sum of x^2 over the elements this block visits (grid-stride).
__global__ void SquaredNormPartialsKernel(double* partials, const float* x, int64_t n) {
  double sum = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const double value = x[i];
    sum += value * value;
  }
  sum = BlockReduceSum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// One block: *result = sum of partials[0, count).
__global__ void SumPartialsKernel(double* result, const double* partials, int count) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = BlockReduceSum(sum);
  if (threadIdx.x == 0) *result = sum;
}

__global__ void ScaleKernel(float* x, float s, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

}  // namespace

absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                         const AdamWParams& p, cudaStream_t stream) {
  ArgCheck check("AdamWUpdate");
  check.NotNull("params", params).NotNull("grads", grads).NotNull("m", m).NotNull("v", v);
  check.NonNegative("n", n).AtLeast("step", p.step, 1).GridFits(CeilDiv(n, kBlock));
  if (!check.ok() || n == 0) return check.status();
  const float bias_correction1 = 1.0f - powf(p.beta1, static_cast<float>(p.step));
  const float bias_correction2_sqrt = sqrtf(1.0f - powf(p.beta2, static_cast<float>(p.step)));
  AdamWKernel<<<CeilDiv(n, kBlock), kBlock, 0, stream>>>(
      params, grads, m, v, n, p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_scale,
      bias_correction1, bias_correction2_sqrt);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status SquaredNorm(double* result, double* scratch, const float* x, int64_t n,
                         cudaStream_t stream) {
  ArgCheck check("SquaredNorm");
  check.NotNull("result", result).NotNull("scratch", scratch).NotNull("x", x);
  RETURN_IF_ERROR(check.NonNegative("n", n).status());
  if (n == 0) {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(result, 0, sizeof(double), stream));
    return absl::OkStatus();
  }
  // At most one partial per scratch slot; the grid depends on n only (determinism).
  const int blocks =
      static_cast<int>(std::min<int64_t>(CeilDiv(n, kBlock), kSquaredNormScratchDoubles));
  SquaredNormPartialsKernel<<<blocks, kBlock, 0, stream>>>(scratch, x, n);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  SumPartialsKernel<<<1, kBlock, 0, stream>>>(result, scratch, blocks);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status Scale(float* x, float s, int64_t n, cudaStream_t stream) {
  ArgCheck check("Scale");
  check.NotNull("x", x).NonNegative("n", n).GridFits(CeilDiv(n, kBlock));
  if (!check.ok() || n == 0) return check.status();
  ScaleKernel<<<CeilDiv(n, kBlock), kBlock, 0, stream>>>(x, s, n);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cuda
