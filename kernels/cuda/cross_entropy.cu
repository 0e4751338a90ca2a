#include "kernels/cuda/cross_entropy.cuh"

#include <cmath>

#include "kernels/common/arg_check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/reduce.cuh"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kRowBlock = 512;
constexpr int kWarps = kRowBlock / kWarpSize;
constexpr int kBlock = 256;

// Online softmax state: running max m and sum s of exp(x - m) over the values seen.
struct MaxSum {
  float m;
  float s;
};

// Combines two partial states. An empty or all -inf part (m = -inf) contributes nothing.
__device__ __forceinline__ MaxSum Merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, a.s + b.s};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum WarpMerge(MaxSum v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, offset),
                 __shfl_xor_sync(0xffffffffu, v.s, offset)};
    v = Merge(v, other);
  }
  return v;
}

// One block per row n.
__global__ void CrossEntropyForwardKernel(float* losses, float* probs, const float* logits,
                                          const int32_t* targets, int V) {
  __shared__ MaxSum warp_parts[kWarps];
  __shared__ MaxSum row_total;
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * V;
  const float* x = logits + offset;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;

  // The target's logit, read before the barriers below: after them probs[] is written, and
  // probs may alias logits. An out-of-range target gives a NaN loss.
  float target_logit = 0.0f;
  if (threadIdx.x == 0) {
    const int32_t target = targets[blockIdx.x];
    target_logit = target >= 0 && target < V ? x[target] : NAN;
  }

  MaxSum part{-INFINITY, 0.0f};
  for (int j = threadIdx.x; j < V; j += kRowBlock) {
    const float v = x[j];
    if (v > part.m) {
      part.s = part.s * expf(part.m - v) + 1.0f;
      part.m = v;
    } else {
      // -inf adds nothing (and must not compute -inf - -inf); NaN propagates into s.
      part.s += v == -INFINITY ? 0.0f : expf(v - part.m);
    }
  }
  part = WarpMerge(part);
  if (lane == 0) warp_parts[warp] = part;
  __syncthreads();
  if (warp == 0) {
    MaxSum total = lane < kWarps ? warp_parts[lane] : MaxSum{-INFINITY, 0.0f};
    total = WarpMerge(total);
    if (lane == 0) row_total = total;
  }
  __syncthreads();
  const MaxSum total = row_total;

  const float inv_sum = 1.0f / total.s;
  float* p = probs + offset;
  for (int j = threadIdx.x; j < V; j += kRowBlock) p[j] = expf(x[j] - total.m) * inv_sum;
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(total.s) + total.m - target_logit;
}

// dlogits[n, j] = (probs[n, j] - [j == targets[n]]) * dloss, one thread per element.
__global__ void CrossEntropyBackwardKernel(float* dlogits, const float* probs,
                                           const int32_t* targets, float dloss, int64_t N, int V) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * V) return;
  const int j = static_cast<int>(i % V);
  const float indicator = j == targets[i / V] ? 1.0f : 0.0f;
  dlogits[i] = (probs[i] - indicator) * dloss;
}

}  // namespace

absl::Status CrossEntropyForward(float* losses, float* probs, const float* logits,
                                 const int32_t* targets, int N, int V, cudaStream_t stream) {
  ArgCheck check("CrossEntropyForward");
  check.NotNull("losses", losses).NotNull("probs", probs).NotNull("logits", logits);
  check.NotNull("targets", targets).NonNegative("N", N).Positive("V", V);
  if (!check.ok() || N == 0) return check.status();
  CrossEntropyForwardKernel<<<N, kRowBlock, 0, stream>>>(losses, probs, logits, targets, V);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                  float dloss, int N, int V, cudaStream_t stream) {
  ArgCheck check("CrossEntropyBackward");
  check.NotNull("dlogits", dlogits).NotNull("probs", probs).NotNull("targets", targets);
  check.NonNegative("N", N).Positive("V", V);
  const int64_t total = static_cast<int64_t>(N) * V;
  check.GridFits(CeilDiv(total, kBlock));
  if (!check.ok() || N == 0) return check.status();
  CrossEntropyBackwardKernel<<<CeilDiv(total, kBlock), kBlock, 0, stream>>>(dlogits, probs, targets,
                                                                            dloss, N, V);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cuda
