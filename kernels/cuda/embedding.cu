#include "kernels/cuda/embedding.cuh"

#include "kernels/common/arg_check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/reduce.cuh"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kBlock = 256;
// EmbeddingBackward's dwte kernel: vocabulary buckets (one warp each per column tile), warps per
// block, and tokens staged in shared memory at a time.
constexpr int kBuckets = 64;
constexpr int kWarpsPerBlock = 8;
constexpr int kTokenChunk = 1024;
static_assert(kBuckets % kWarpsPerBlock == 0, "whole blocks of buckets");

// One thread per output element (n, c), n = b*T + t.
__global__ void EmbeddingForwardKernel(float* out, const int32_t* tokens, const float* wte,
                                       const float* wpe, int64_t N, int T, int C) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * C) return;
  int64_t n = i / C;
  int c = static_cast<int>(i % C);
  int t = static_cast<int>(n % T);
  out[i] = wte[static_cast<int64_t>(tokens[n]) * C + c] + wpe[static_cast<int64_t>(t) * C + c];
}

// dwte: block (32, kWarpsPerBlock), grid (CeilDiv(C, 32), kBuckets / kWarpsPerBlock). Lane =
// column within the tile; warp = bucket. A warp scans every token in order and adds the rows
// whose token falls in its bucket; the bucket test is uniform across the warp.
__global__ void EmbeddingBackwardWteKernel(float* dwte, const float* dout, const int32_t* tokens,
                                           int64_t N, int C) {
  __shared__ int32_t chunk[kTokenChunk];
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  const int bucket = blockIdx.y * kWarpsPerBlock + threadIdx.y;
  const int tid = threadIdx.y * kWarpSize + threadIdx.x;
  for (int64_t base = 0; base < N; base += kTokenChunk) {
    const int len = static_cast<int>(N - base < kTokenChunk ? N - base : kTokenChunk);
    __syncthreads();  // the previous chunk is no longer read
    for (int i = tid; i < len; i += kWarpSize * kWarpsPerBlock) chunk[i] = tokens[base + i];
    __syncthreads();
    if (c >= C) continue;  // after the barriers: every thread must reach them
    for (int i = 0; i < len; ++i) {
      const int32_t token = chunk[i];
      if (token % kBuckets == bucket) {
        dwte[static_cast<int64_t>(token) * C + c] += dout[(base + i) * C + c];
      }
    }
  }
}

// dwpe: one thread per (t, c), summing over b in order.
__global__ void EmbeddingBackwardWpeKernel(float* dwpe, const float* dout, int B, int T, int C) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t TC = static_cast<int64_t>(T) * C;
  if (i >= TC) return;
  float acc = dwpe[i];
  for (int b = 0; b < B; ++b) acc += dout[b * TC + i];
  dwpe[i] = acc;
}

}  // namespace

absl::Status EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                              int B, int T, int C, cudaStream_t stream) {
  ArgCheck check("EmbeddingForward");
  check.NotNull("out", out).NotNull("tokens", tokens).NotNull("wte", wte).NotNull("wpe", wpe);
  check.NonNegative("B", B).NonNegative("T", T).NonNegative("C", C);
  const int64_t total = static_cast<int64_t>(B) * T * C;
  check.GridFits(CeilDiv(total, kBlock));
  if (!check.ok() || total == 0) return check.status();
  EmbeddingForwardKernel<<<CeilDiv(total, kBlock), kBlock, 0, stream>>>(
      out, tokens, wte, wpe, static_cast<int64_t>(B) * T, T, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                               int B, int T, int C, cudaStream_t stream) {
  ArgCheck check("EmbeddingBackward");
  check.NotNull("dwte", dwte).NotNull("dwpe", dwpe).NotNull("dout", dout);
  check.NotNull("tokens", tokens);
  check.NonNegative("B", B).NonNegative("T", T).NonNegative("C", C);
  const int64_t TC = static_cast<int64_t>(T) * C;
  check.GridFits(CeilDiv(TC, kBlock));
  if (!check.ok() || B == 0 || TC == 0) return check.status();

  const dim3 wte_block(kWarpSize, kWarpsPerBlock);
  const dim3 wte_grid(static_cast<unsigned>(CeilDiv(C, kWarpSize)), kBuckets / kWarpsPerBlock);
  EmbeddingBackwardWteKernel<<<wte_grid, wte_block, 0, stream>>>(dwte, dout, tokens,
                                                                 static_cast<int64_t>(B) * T, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());

  EmbeddingBackwardWpeKernel<<<CeilDiv(TC, kBlock), kBlock, 0, stream>>>(dwpe, dout, B, T, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cuda
