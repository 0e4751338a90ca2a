#include "kernels/cpu/residual.h"

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"

namespace dtrain::kernels::cpu {

absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n,
                             int num_threads) {
  ArgCheck check("ResidualForward");
  check.NotNull("out", out).NotNull("a", a).NotNull("b", b).NonNegative("n", n);
  check.Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());
#pragma omp parallel for simd num_threads(num_threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  return absl::OkStatus();
}

absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t n, int num_threads) {
  ArgCheck check("ResidualBackward");
  check.NotNull("da", da).NotNull("db", db).NotNull("dout", dout).NonNegative("n", n);
  check.Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());
#pragma omp parallel for simd num_threads(num_threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float d = dout[i];
    da[i] += d;
    db[i] += d;
  }
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
