#include "kernels/cpu/layernorm.h"

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"

namespace dtrain::kernels::cpu {

absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C,
                              int num_threads) {
  ArgCheck check("LayerNormForward");
  check.NotNull("out", out).NotNull("mean", mean).NotNull("rstd", rstd).NotNull("inp", inp);
  check.NotNull("weight", weight).NotNull("bias", bias);
  check.NonNegative("N", N).Positive("C", C).Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());

#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + int64_t{n} * C;
    float* y = out + int64_t{n} * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    const float m = sum / C;
    // Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2, which cancels.
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(sq / C + kLayerNormEps);
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
  return absl::OkStatus();
}

absl::Status LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C, int num_threads) {
  ArgCheck check("LayerNormBackward");
  check.NotNull("dinp", dinp).NotNull("dweight", dweight).NotNull("dbias", dbias);
  check.NotNull("dout", dout).NotNull("inp", inp).NotNull("weight", weight);
  check.NotNull("mean", mean).NotNull("rstd", rstd);
  check.NonNegative("N", N).Positive("C", C).Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());

  // dweight and dbias sum over rows: each thread sums its rows into its own partial (C each),
  // and the partials are added in thread order at the end, so results are deterministic.
  std::vector<float> partials(int64_t{num_threads} * 2 * C, 0.0f);
#pragma omp parallel num_threads(num_threads)
  {
    float* dw = partials.data() + int64_t{omp_get_thread_num()} * 2 * C;
    float* db = dw + C;
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* x = inp + int64_t{n} * C;
      const float* dy = dout + int64_t{n} * C;
      float* dx = dinp + int64_t{n} * C;
      const float m = mean[n];
      const float s = rstd[n];
      // mean_c(dnorm) and mean_c(dnorm * norm).
      float dnorm_mean = 0.0f;
      float dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = weight[c] * dy[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = weight[c] * dy[c];
        db[c] += dy[c];
        dw[c] += norm * dy[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
  }
  for (int t = 0; t < num_threads; ++t) {
    const float* dw = partials.data() + int64_t{t} * 2 * C;
    const float* db = dw + C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      dweight[c] += dw[c];
      dbias[c] += db[c];
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
