// Compiled with -ffast-math (see BUILD) so the softmax's expf vectorizes into glibc's libmvec.
// Only finite values are involved: masked entries are skipped, never set to -inf.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/softmax_row.h"

namespace dtrain::kernels::cpu {
namespace {

// Rows of the scores per block. Row block [r0, r1) attends to columns [0, r1) only, so the
// products skip the upper triangle's blocks: at T = 128 they do 10/16 of the full (T,T) work,
// and a block's scores (32 x T floats, 16 KiB at T = 128) stay in L1/L2 between the sgemm that
// writes them, the softmax and the sgemm that reads them.
constexpr int kRowBlock = 32;

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
      float* o = out + int64_t{b} * T * C + h * hs;    // (T,hs), row stride C
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock), R = r1 - r0;
        float* a_rows = a + int64_t{r0} * T;  // rows [r0, r1) of a, columns [0, r1) used
        // a[r0:r1, 0:r1] = q[r0:r1] @ k[0:r1]^T / sqrt(hs); the block's upper triangle is
        // computed and then masked, columns >= r1 are never computed.
        SerialSgemm(false, true, R, r1, hs, scale, q + int64_t{r0} * ld_qkv, ld_qkv, k, ld_qkv,
                    0.0f, a_rows, T);
        for (int t = r0; t < r1; ++t) {
          float* row = a + int64_t{t} * T;
          float sum;
          SoftmaxRow(row, row, t + 1, &sum);
          for (int u = t + 1; u < T; ++u) row[u] = 0.0f;
        }
        // out[r0:r1] = a[r0:r1, 0:r1] @ v[0:r1].
        SerialSgemm(false, false, R, hs, r1, 1.0f, a_rows, T, v, ld_qkv, 0.0f, o + int64_t{r0} * C,
                    C);
      }
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

      // dk and dv sum over the row blocks that reach them: start them at zero.
      for (int t = 0; t < T; ++t) {
        std::fill_n(dk + int64_t{t} * ld_qkv, hs, 0.0f);
        std::fill_n(dv + int64_t{t} * ld_qkv, hs, 0.0f);
      }
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock), R = r1 - r0;
        const float* a_rows = a + int64_t{r0} * T;  // (R, r1) used of rows [r0, r1)
        float* da_rows = da + int64_t{r0} * T;
        const float* dy_rows = dy + int64_t{r0} * C;
        // datt[r0:r1, 0:r1] = dout[r0:r1] @ v[0:r1]^T;  dv[0:r1] += a[r0:r1, 0:r1]^T @ dout[r0:r1].
        SerialSgemm(false, true, R, r1, hs, 1.0f, dy_rows, C, v, ld_qkv, 0.0f, da_rows, T);
        SerialSgemm(true, false, r1, hs, R, 1.0f, a_rows, T, dy_rows, C, 1.0f, dv, ld_qkv);
        // Softmax backward, row by row, in place: da becomes dpreatt (zero above the diagonal,
        // up to column r1; the products below read no further).
        for (int t = r0; t < r1; ++t) {
          const float* arow = a + int64_t{t} * T;
          float* drow = da + int64_t{t} * T;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int u = 0; u <= t; ++u) dot += arow[u] * drow[u];
#pragma omp simd
          for (int u = 0; u <= t; ++u) drow[u] = arow[u] * (drow[u] - dot);
          for (int u = t + 1; u < r1; ++u) drow[u] = 0.0f;
        }
        // The 1/sqrt(hs) of the forward's scores goes into alpha.
        // dq[r0:r1] = dpreatt[r0:r1, 0:r1] @ k[0:r1];  dk[0:r1] += dpreatt[r0:r1, 0:r1]^T @
        // q[r0:r1].
        SerialSgemm(false, false, R, hs, r1, scale, da_rows, T, k, ld_qkv, 0.0f,
                    dq + int64_t{r0} * ld_qkv, ld_qkv);
        SerialSgemm(true, false, r1, hs, R, scale, da_rows, T, q + int64_t{r0} * ld_qkv, ld_qkv,
                    1.0f, dk, ld_qkv);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
