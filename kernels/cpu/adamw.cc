#include "kernels/cpu/adamw.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/common/elementwise.h"

namespace dtrain::kernels::cpu {

absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                         const AdamWParams& p, int num_threads) {
  ArgCheck check("AdamWUpdate");
  check.NotNull("params", params).NotNull("grads", grads).NotNull("m", m).NotNull("v", v);
  check.NonNegative("n", n).Positive("step", p.step).Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());

  // Bias corrections in double, as PyTorch computes them (Python floats), then rounded once.
  const float bias_correction1 = static_cast<float>(1.0 - std::pow(double{p.beta1}, p.step));
  const float bias_correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(double{p.beta2}, p.step)));
#pragma omp parallel for simd num_threads(num_threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    AdamWElement(&params[i], grads[i] * p.grad_scale, &m[i], &v[i], p.lr, p.beta1, p.beta2, p.eps,
                 p.weight_decay, bias_correction1, bias_correction2_sqrt);
  }
  return absl::OkStatus();
}

absl::StatusOr<double> SquaredNorm(const float* x, int64_t n, int num_threads) {
  ArgCheck check("SquaredNorm");
  check.NotNull("x", x).NonNegative("n", n).Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());

  std::vector<double> partial(num_threads, 0.0);
#pragma omp parallel num_threads(num_threads)
  {
    const int t = omp_get_thread_num();
    const int parts = omp_get_num_threads();
    const int64_t begin = n * t / parts;
    const int64_t end = n * (t + 1) / parts;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = begin; i < end; ++i) sum += double{x[i]} * double{x[i]};
    partial[t] = sum;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

absl::Status Scale(float* x, float s, int64_t n, int num_threads) {
  ArgCheck check("Scale");
  check.NotNull("x", x).NonNegative("n", n).Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());
#pragma omp parallel for simd num_threads(num_threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
