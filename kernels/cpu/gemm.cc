#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <libxsmm.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cpu/partition.h"

namespace dtrain::kernels::cpu {
namespace {

// Below this many multiply-adds one sgemm call beats splitting it across threads.
constexpr int64_t kMinParallelMacs = int64_t{64} * 64 * 64;

// libxsmm's kernels do not pack their operands: on one core of this EPYC they beat OpenBLAS by
// 1-24 % where c is at most 256 columns wide and the product at most 2^28 multiply-adds (the
// model's products at C = 128-256 and per tensor-parallel rank, attention's per-head ones), and
// lose up to 17 % on wider or larger ones, whose operands they stream from outside the caches
// (docs/PERFORMANCE.md "Training step" has the table).
constexpr int kMaxXsmmColumns = 256;
constexpr int64_t kMaxXsmmMacs = int64_t{256} * 1024 * 1024;

// c = op(a) @ op(b) (+ c when beta = 1) by a libxsmm kernel made for the shape, if there is one:
// alpha 1, beta 0 or 1, b not transposed (libxsmm 1.17 generates no kernel whose first
// column-major operand is transposed, which row-major trans_b would be). Row-major c (m,n) is
// column-major c^T (n,m) = op(b)^T @ op(a)^T, so b goes first. False: nothing was done.
bool XsmmSgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
               int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  static const bool openblas_only = [] {
    const char* forced = std::getenv("DTRAIN_CPU_GEMM");
    return forced != nullptr && std::string_view(forced) == "openblas";
  }();
  if (openblas_only || trans_b || n > kMaxXsmmColumns || int64_t{m} * n * k > kMaxXsmmMacs) {
    return false;
  }
  if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f) || k == 0) return false;
  static const bool ready = [] {
    libxsmm_init();
    return true;
  }();
  (void)ready;
  const libxsmm_blasint xm = n, xn = m, xk = k, xlda = ldb, xldb = lda, xldc = ldc;
  const int flags = trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
  const libxsmm_smmfunction kernel =
      libxsmm_smmdispatch(xm, xn, xk, &xlda, &xldb, &xldc, &alpha, &beta, &flags, nullptr);
  if (kernel == nullptr) return false;
  kernel(b, a, c);
  return true;
}

}  // namespace

void UseSingleThreadedBlas() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

void SerialSgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  if (XsmmSgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void ParallelSgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc,
                   int num_threads) {
  UseSingleThreadedBlas();
  if (num_threads <= 1 || int64_t{m} * n * k < kMinParallelMacs) {
    SerialSgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split the longer side of c into num_threads blocks whose bounds are multiples of 16, which
  // keeps OpenBLAS's micro-kernels on full tiles.
  const bool split_rows = m >= n;
  const int extent = split_rows ? m : n;
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int t = 0; t < num_threads; ++t) {
    const int begin = SplitPoint(extent, t, num_threads, 16);
    const int end = SplitPoint(extent, t + 1, num_threads, 16);
    if (begin >= end) continue;
    if (split_rows) {
      // Rows [begin, end) of c come from rows [begin, end) of op(a).
      const float* a_rows = trans_a ? a + begin : a + int64_t{begin} * lda;
      SerialSgemm(trans_a, trans_b, end - begin, n, k, alpha, a_rows, lda, b, ldb, beta,
                  c + int64_t{begin} * ldc, ldc);
    } else {
      // Columns [begin, end) of c come from columns [begin, end) of op(b).
      const float* b_cols = trans_b ? b + int64_t{begin} * ldb : b + begin;
      SerialSgemm(trans_a, trans_b, m, end - begin, k, alpha, a, lda, b_cols, ldb, beta, c + begin,
                  ldc);
    }
  }
}

absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                  int lda, const float* b, int ldb, float beta, float* c, int ldc,
                  int num_threads) {
  ArgCheck check("Gemm");
  check.NonNegative("m", m).NonNegative("n", n).NonNegative("k", k);
  check.NotNull("a", a).NotNull("b", b).NotNull("c", c);
  check.AtLeast(trans_a ? "lda (a is (k,m))" : "lda (a is (m,k))", lda,
                std::max(1, trans_a ? m : k));
  check.AtLeast(trans_b ? "ldb (b is (n,k))" : "ldb (b is (k,n))", ldb,
                std::max(1, trans_b ? k : n));
  check.AtLeast("ldc (c is (m,n))", ldc, std::max(1, n));
  check.Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());
  ParallelSgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, num_threads);
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
