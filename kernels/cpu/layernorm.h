// LayerNorm over the channels of each row, eps = 1e-5 (GPT-2's).
//
//   forward:   mean[n] = sum_c inp[n,c] / C;  rstd[n] = 1 / sqrt(sum_c (inp[n,c] - mean)^2 / C +
//   eps)
//              norm = (inp - mean) * rstd;    out = norm * weight + bias
//   backward:  dbias += sum_n dout;  dweight += sum_n dout * norm
//              dnorm = dout * weight
//              dinp += rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm))
//
// All three gradients accumulate (+=): dinp is the residual stream's gradient, which the block's
// other branch also adds into.
// Errors: InvalidArgument for null pointers, N < 0, C <= 0, num_threads < 1.
#ifndef DTRAIN_KERNELS_CPU_LAYERNORM_H_
#define DTRAIN_KERNELS_CPU_LAYERNORM_H_

#include "absl/status/status.h"

namespace dtrain::kernels::cpu {

constexpr float kLayerNormEps = 1e-5f;

// out (N,C), mean (N), rstd (N), inp (N,C), weight (C), bias (C).
absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C,
                              int num_threads);

// dinp (N,C) +=, dweight (C) +=, dbias (C) +=; dout (N,C), inp (N,C), weight (C), and the
// forward's mean (N) and rstd (N).
absl::Status LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C, int num_threads);

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_LAYERNORM_H_
