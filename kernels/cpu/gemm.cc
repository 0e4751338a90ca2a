#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cpu/partition.h"

namespace dtrain::kernels::cpu {
namespace {

// Below this many multiply-adds one sgemm call beats splitting it across threads.
constexpr int64_t kMinParallelMacs = int64_t{64} * 64 * 64;

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
