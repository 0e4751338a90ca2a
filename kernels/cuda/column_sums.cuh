// Column sums of per-element terms of an (N, C) row-major matrix, added into K output vectors:
// the parameter gradients that sum over rows (a bias's, LayerNorm's weight and bias). Include
// from .cu files only (it launches kernels).
//
// Two passes, deterministic (no atomics, a fixed order of additions), and spread over the whole
// GPU: one block per (32 columns, chunk of kColumnSumChunkRows rows) writes each chunk's partial
// sums to scratch, then one thread per column adds the chunks' partials in chunk order. (One
// block per 32 columns, looping over all rows, left most SMs idle: 24 blocks for C = 768, 90 us
// for a LayerNorm's 4096 rows on an H200, where the bytes read take under 10.)
//
//   AddColumnSums<2>({dweight, dbias}, N, C, terms, scratch, stream)
//   where terms(n, c, acc) does acc[0] += ..., acc[1] += ... for row n, column c.
#ifndef DTRAIN_KERNELS_CUDA_COLUMN_SUMS_CUH_
#define DTRAIN_KERNELS_CUDA_COLUMN_SUMS_CUH_

#include <cstdint>

#include "absl/status/status.h"
#include "common/device_scratch.h"
#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/reduce.cuh"

namespace dtrain::kernels::cuda {

constexpr int kColumnSumChunkRows = dtrain::kColumnSumChunkRows;  // plan/memory.cc counts it
constexpr int kColumnSumRowLanes = 16;  // pass 1 blocks: (32 columns, 16 row lanes)
constexpr int kColumnSumScratchSlot = 2;

template <int K>
struct ColumnOutputs {
  float* out[K];
};

// partial (chunks, K, C): block (x, y) sums rows [y * chunk, (y + 1) * chunk) of columns
// [32 x, 32 x + 32); row lane t takes rows t, t + 16, ...; lane 0 adds the 16 lanes in order.
template <int K, typename Terms>
__global__ void ColumnPartialSumsKernel(float* partial, int N, int C, Terms terms) {
  __shared__ float lanes[K][kColumnSumRowLanes][kWarpSize];
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  const int begin = blockIdx.y * kColumnSumChunkRows;
  const int end = min(N, begin + kColumnSumChunkRows);
  float acc[K];
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  if (c < C) {
    for (int n = begin + threadIdx.y; n < end; n += kColumnSumRowLanes) terms(n, c, acc);
  }
  for (int k = 0; k < K; ++k) lanes[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int k = 0; k < K; ++k) {
    float sum = lanes[k][0][threadIdx.x];
    for (int y = 1; y < kColumnSumRowLanes; ++y) sum += lanes[k][y][threadIdx.x];
    partial[(static_cast<int64_t>(blockIdx.y) * K + k) * C + c] = sum;
  }
}

// outs[k][c] += sum over chunks, in chunk order, of partial[chunk][k][c].
template <int K>
__global__ void AddColumnPartialsKernel(ColumnOutputs<K> outs, const float* partial, int chunks,
                                        int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int k = 0; k < K; ++k) {
    float sum = 0.0f;
    for (int chunk = 0; chunk < chunks; ++chunk) {
      sum += partial[(static_cast<int64_t>(chunk) * K + k) * C + c];
    }
    outs.out[k][c] += sum;
  }
}

// Adds the column sums of `terms` over rows [0, N) into outs (each C floats). N = 0 adds
// nothing. Errors: InvalidArgument when the grid does not fit, scratch's errors.
template <int K, typename Terms>
absl::Status AddColumnSums(ColumnOutputs<K> outs, int N, int C, Terms terms, DeviceScratch* scratch,
                           cudaStream_t stream) {
  if (N <= 0 || C <= 0) return absl::OkStatus();
  const int chunks = static_cast<int>(CeilDiv(N, kColumnSumChunkRows));
  ArgCheck check("AddColumnSums");
  check.That(chunks <= 65535,
             absl::StrCat("N=", N, " needs ", chunks, " row chunks (at most ", 65535, ")"));
  check.NotNull("scratch", scratch);
  RETURN_IF_ERROR(check.status());
  ASSIGN_OR_RETURN(void* buffer, scratch->Get(kColumnSumScratchSlot,
                                              sizeof(float) * static_cast<size_t>(chunks) * K * C));
  auto* partial = static_cast<float*>(buffer);
  const dim3 grid(static_cast<unsigned>(CeilDiv(C, kWarpSize)), static_cast<unsigned>(chunks));
  ColumnPartialSumsKernel<K>
      <<<grid, dim3(kWarpSize, kColumnSumRowLanes), 0, stream>>>(partial, N, C, terms);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  constexpr int kThreads = 256;
  AddColumnPartialsKernel<K>
      <<<CeilDiv(C, kThreads), kThreads, 0, stream>>>(outs, partial, chunks, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_COLUMN_SUMS_CUH_
