// Compiled with -ffast-math (see BUILD) so the softmax's expf vectorizes into glibc's libmvec.
// Only finite values are involved: masked entries are skipped, never set to -inf.
#include "kernels/cpu/attention.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/softmax_row.h"

namespace dtrain::kernels::cpu {
namespace {

absl::Status CheckSizes(ArgCheck& check, int B, int T, int C, int NH, int num_threads) {
  check.NonNegative("B", B).NonNegative("T", T).Positive("C", C).Positive("NH", NH);
  check.That(C % NH == 0, absl::StrCat("C = ", C, " must be a multiple of NH = ", NH));
  check.Positive("num_threads", num_threads);
  return check.status();
}

}  // namespace

absl::Status AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                              int num_threads) {
  ArgCheck check("AttentionForward");
  check.NotNull("out", out).NotNull("att", att).NotNull("qkv", qkv);
  RETURN_IF_ERROR(CheckSizes(check, B, T, C, NH, num_threads));
  UseSingleThreadedBlas();

  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ld_qkv = 3 * C;
#pragma omp parallel for collapse(2) num_threads(num_threads) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + int64_t{b} * T * ld_qkv + h * hs;  // (T,hs), row stride 3C
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + (int64_t{b} * NH + h) * T * T;  // (T,T)
      // a = q @ k^T / sqrt(hs); the upper triangle is computed and then masked.
      SerialSgemm(false, true, T, T, hs, scale, q, ld_qkv, k, ld_qkv, 0.0f, a, T);
      for (int t = 0; t < T; ++t) {
        float* row = a + int64_t{t} * T;
        float sum;
        SoftmaxRow(row, row, t + 1, &sum);
        for (int u = t + 1; u < T; ++u) row[u] = 0.0f;
      }
      // out[b, :, h*hs:(h+1)*hs] (T,hs), row stride C = a @ v.
      SerialSgemm(false, false, T, hs, T, 1.0f, a, T, v, ld_qkv, 0.0f,
                  out + int64_t{b} * T * C + h * hs, C);
    }
  }
  return absl::OkStatus();
}

absl::Status AttentionBackward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                               const float* att, int B, int T, int C, int NH, int num_threads) {
  ArgCheck check("AttentionBackward");
  check.NotNull("dqkv", dqkv).NotNull("scratch", scratch).NotNull("dout", dout);
  check.NotNull("qkv", qkv).NotNull("att", att);
  RETURN_IF_ERROR(CheckSizes(check, B, T, C, NH, num_threads));
  UseSingleThreadedBlas();

  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ld_qkv = 3 * C;
#pragma omp parallel for collapse(2) num_threads(num_threads) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int64_t head = int64_t{b} * T * ld_qkv + h * hs;
      const float* q = qkv + head;  // (T,hs), row stride 3C, likewise k, v, dq, dk, dv
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + head;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* dy = dout + int64_t{b} * T * C + h * hs;  // (T,hs), row stride C
      const float* a = att + (int64_t{b} * NH + h) * T * T;  // (T,T)
      float* da = scratch + (int64_t{b} * NH + h) * T * T;   // (T,T)

      SerialSgemm(false, true, T, T, hs, 1.0f, dy, C, v, ld_qkv, 0.0f, da, T);  // datt
      SerialSgemm(true, false, T, hs, T, 1.0f, a, T, dy, C, 0.0f, dv, ld_qkv);  // dv
      // Softmax backward, row by row, in place: da becomes dpreatt (zero above the diagonal).
      for (int t = 0; t < T; ++t) {
        const float* arow = a + int64_t{t} * T;
        float* drow = da + int64_t{t} * T;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int u = 0; u <= t; ++u) dot += arow[u] * drow[u];
#pragma omp simd
        for (int u = 0; u <= t; ++u) drow[u] = arow[u] * (drow[u] - dot);
        for (int u = t + 1; u < T; ++u) drow[u] = 0.0f;
      }
      // The 1/sqrt(hs) of the forward's scores goes into alpha.
      SerialSgemm(false, false, T, hs, T, scale, da, T, k, ld_qkv, 0.0f, dq, ld_qkv);  // dq
      SerialSgemm(true, false, T, hs, T, scale, da, T, q, ld_qkv, 0.0f, dk, ld_qkv);   // dk
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
