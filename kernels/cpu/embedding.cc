#include "kernels/cpu/embedding.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cpu/partition.h"

namespace dtrain::kernels::cpu {
namespace {

absl::Status CheckArgs(ArgCheck& check, const int32_t* tokens, int B, int T, int C,
                       int num_threads) {
  check.NotNull("tokens", tokens).NonNegative("B", B).NonNegative("T", T).Positive("C", C);
  check.Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());
  const int64_t N = int64_t{B} * T;
  for (int64_t i = 0; i < N; ++i) {
    if (tokens[i] < 0) {
      return check
          .Fail(absl::StrCat("tokens[", i / T, ",", i % T, "] = ", tokens[i], " is negative"))
          .status();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                              int B, int T, int C, int num_threads) {
  ArgCheck check("EmbeddingForward");
  check.NotNull("out", out).NotNull("wte", wte).NotNull("wpe", wpe);
  RETURN_IF_ERROR(CheckArgs(check, tokens, B, T, C, num_threads));

  const int64_t N = int64_t{B} * T;
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* tok = wte + int64_t{tokens[n]} * C;
    const float* pos = wpe + (n % T) * C;
    float* row = out + n * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) row[c] = tok[c] + pos[c];
  }
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                               int B, int T, int C, int num_threads) {
  ArgCheck check("EmbeddingBackward");
  check.NotNull("dwte", dwte).NotNull("dwpe", dwpe).NotNull("dout", dout);
  RETURN_IF_ERROR(CheckArgs(check, tokens, B, T, C, num_threads));

  // Rows with the same token add into the same dwte row, so threads split the channels instead
  // of the rows: each thread owns a block of columns of dwte and dwpe and walks every (b,t) in
  // order. No races, and the summation order does not depend on the thread count.
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int part = 0; part < num_threads; ++part) {
    const int begin = SplitPoint(C, part, num_threads, 16);
    const int end = SplitPoint(C, part + 1, num_threads, 16);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const int64_t n = int64_t{b} * T + t;
        const float* d = dout + n * C;
        float* tok = dwte + int64_t{tokens[n]} * C;
        float* pos = dwpe + int64_t{t} * C;
#pragma omp simd
        for (int c = begin; c < end; ++c) {
          tok[c] += d[c];
          pos[c] += d[c];
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
