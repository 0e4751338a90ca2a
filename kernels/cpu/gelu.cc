// Compiled with -ffast-math (see BUILD) so that the tanhf inside GeluTanh vectorizes into
// glibc's libmvec (_ZGVdN8v_tanhf): 8 lanes per call instead of one scalar tanhf per element.
#include "kernels/cpu/gelu.h"

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/common/elementwise.h"

namespace dtrain::kernels::cpu {

absl::Status GeluForward(float* out, const float* inp, int64_t n, int num_threads) {
  ArgCheck check("GeluForward");
  check.NotNull("out", out).NotNull("inp", inp).NonNegative("n", n);
  check.Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());
#pragma omp parallel for simd num_threads(num_threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = GeluTanh(inp[i]);
  return absl::OkStatus();
}

absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n,
                          int num_threads) {
  ArgCheck check("GeluBackward");
  check.NotNull("dinp", dinp).NotNull("inp", inp).NotNull("dout", dout).NonNegative("n", n);
  check.Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());
#pragma omp parallel for simd num_threads(num_threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) dinp[i] = GeluTanhGrad(inp[i]) * dout[i];
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
