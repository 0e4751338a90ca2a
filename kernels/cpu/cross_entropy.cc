// Compiled with -ffast-math (see BUILD) so expf vectorizes into glibc's libmvec; logits are
// assumed finite.
#include "kernels/cpu/cross_entropy.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cpu/softmax_row.h"

namespace dtrain::kernels::cpu {
namespace {

absl::Status CheckArgs(ArgCheck& check, const int32_t* targets, int N, int V, int num_threads) {
  check.NotNull("targets", targets).NonNegative("N", N).Positive("V", V);
  check.Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0 || targets[n] >= V) {
      return check
          .Fail(absl::StrCat("targets[", n, "] = ", targets[n], " is outside [0, V=", V, ")"))
          .status();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CrossEntropyForward(float* losses, float* probs, const float* logits,
                                 const int32_t* targets, int N, int V, int num_threads) {
  ArgCheck check("CrossEntropyForward");
  check.NotNull("losses", losses).NotNull("probs", probs).NotNull("logits", logits);
  RETURN_IF_ERROR(CheckArgs(check, targets, N, V, num_threads));

#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + int64_t{n} * V;
    float* p = probs + int64_t{n} * V;
    float sum = 0.0f;
    const float max = SoftmaxRow(x, p, V, &sum);
    // -log softmax(x)[target] = log(sum) - (x[target] - max): exact even where the probability
    // underflows to zero.
    losses[n] = std::log(sum) - (x[targets[n]] - max);
  }
  return absl::OkStatus();
}

absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                  float dloss, int N, int V, int num_threads) {
  ArgCheck check("CrossEntropyBackward");
  check.NotNull("dlogits", dlogits).NotNull("probs", probs);
  RETURN_IF_ERROR(CheckArgs(check, targets, N, V, num_threads));

#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* p = probs + int64_t{n} * V;
    float* d = dlogits + int64_t{n} * V;
#pragma omp simd
    for (int i = 0; i < V; ++i) d[i] = p[i] * dloss;
    d[targets[n]] -= dloss;
  }
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
