// LayerNorm (eps 1e-5) on the GPU, as llm.c's layernorm.cuh: one warp per row, warp reductions.
#ifndef DTRAIN_KERNELS_CUDA_LAYERNORM_CUH_
#define DTRAIN_KERNELS_CUDA_LAYERNORM_CUH_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace dtrain::kernels::cuda {

class DeviceScratch;  // matmul.cuh

// out (N,C) = (inp - mean) * rstd * weight + bias; saves mean (N) and rstd (N). The variance
// is the biased one, computed in a second pass over the row (sum of squared deviations).
absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C,
                              cudaStream_t stream);

// dinp (N,C) += dnorm-chain; dweight (C) += sum_n dout * norm; dbias (C) += sum_n dout, with
// norm = (inp - mean) * rstd. Deterministic: dweight/dbias are column sums in a fixed order
// (column_sums.cuh: partial sums per chunk of rows in `scratch`), no atomics. dinp must not
// alias dout or inp.
absl::Status LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C, DeviceScratch* scratch,
                               cudaStream_t stream);

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_LAYERNORM_CUH_
