// Gemm: row-major c (m,n) = alpha op(a) (m,k) @ op(b) (k,n) + beta c, with row strides.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/tests/ops_test_util.h"
#include "kernels/tests/reference.h"

namespace dtrain::kernels::testing {
namespace {

struct GemmCase {
  bool trans_a, trans_b;
  int m, n, k;
  int pad;  // extra columns in every leading dimension, never to be read or written
  float alpha, beta;
};

std::string Describe(const GemmCase& g) {
  return absl::StrCat("trans_a=", g.trans_a, " trans_b=", g.trans_b, " m=", g.m, " n=", g.n,
                      " k=", g.k, " pad=", g.pad, " alpha=", g.alpha, " beta=", g.beta);
}

// Runs one case on the backend and on the reference. The padding columns of c hold random
// values that must come back unchanged (the reference leaves them alone too).
void ExpectGemmMatchesReference(Ops& test, const GemmCase& g) {
  SCOPED_TRACE(Describe(g));
  const int a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const int b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  const int lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
  const std::vector<float> a = RandomFloats(int64_t{a_rows} * lda, 11);
  const std::vector<float> b = RandomFloats(int64_t{b_rows} * ldb, 12);
  const std::vector<float> c = RandomFloats(int64_t{g.m} * ldc, 13);
  DeviceBuffer<float> da = test.Upload(a), db = test.Upload(b), dc = test.Upload(c);
  absl::Status status =
      test.backend()->Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, da.data(), lda, db.data(),
                           ldb, g.beta, dc.data(), ldc);
  ASSERT_TRUE(status.ok()) << status;
  Vec want = ToDouble(c);
  reference::Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, ToDouble(a), lda, ToDouble(b), ldb,
                  g.beta, want, ldc);
  EXPECT_TRUE(AllNear(test.Download(dc), want, kForwardTol));
}

TEST_P(Ops, GemmAllTransposesWithPaddedLeadingDimensionsMatchReference) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      ExpectGemmMatchesReference(*this, {trans_a, trans_b, 7, 5, 9, /*pad=*/3, 1.5f, 0.5f});
      ExpectGemmMatchesReference(*this, {trans_a, trans_b, 1, 1, 1, /*pad=*/0, 1.0f, 0.0f});
      ExpectGemmMatchesReference(*this, {trans_a, trans_b, 13, 1, 6, /*pad=*/2, -1.0f, 1.0f});
    }
  }
}

// Large enough that the CPU backend splits c across threads: by rows (m >= n) and by columns.
TEST_P(Ops, GemmLargeShapesSplitAcrossThreadsMatchReference) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      ExpectGemmMatchesReference(*this, {trans_a, trans_b, 130, 70, 50, /*pad=*/5, 1.0f, 0.0f});
      ExpectGemmMatchesReference(*this, {trans_a, trans_b, 40, 150, 70, /*pad=*/1, 0.5f, 2.0f});
    }
  }
}

// The CPU backend gives products up to 256 columns wide with alpha 1 and beta 0 or 1 to
// libxsmm's kernels and the rest to OpenBLAS (kernels/cpu/gemm.cc): both sides of each limit.
TEST_P(Ops, GemmEitherSideOfTheSmallKernelsLimitsMatchesReference) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      for (float beta : {0.0f, 1.0f}) {
        ExpectGemmMatchesReference(*this, {trans_a, trans_b, 33, 256, 70, /*pad=*/3, 1.0f, beta});
        ExpectGemmMatchesReference(*this, {trans_a, trans_b, 33, 257, 70, /*pad=*/3, 1.0f, beta});
        ExpectGemmMatchesReference(*this, {trans_a, trans_b, 96, 64, 128, /*pad=*/0, 1.0f, beta});
      }
    }
  }
}

// beta = 0 overwrites c: NaNs already in c must not leak into the result (BLAS semantics).
TEST_P(Ops, GemmBetaZeroIgnoresNanInC) {
  const std::vector<float> a = RandomFloats(6, 1), b = RandomFloats(6, 2);
  DeviceBuffer<float> da = Upload(a), db = Upload(b), dc = Garbage(4);
  ASSERT_TRUE(
      backend()
          ->Gemm(false, false, 2, 2, 3, 1.0f, da.data(), 3, db.data(), 2, 0.0f, dc.data(), 2)
          .ok());
  Vec want(4, 0.0);
  reference::Gemm(false, false, 2, 2, 3, 1.0, ToDouble(a), 3, ToDouble(b), 2, 0.0, want, 2);
  EXPECT_TRUE(AllNear(Download(dc), want, kForwardTol));
}

// k = 0: the product is empty, so c = beta * c.
TEST_P(Ops, GemmWithEmptyInnerDimensionScalesC) {
  DeviceBuffer<float> a = Filled(1, 1.0f), b = Filled(1, 1.0f);
  DeviceBuffer<float> c = Upload(std::vector<float>{1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(backend()
                  ->Gemm(false, false, 2, 3, 0, 1.0f, a.data(), 1, b.data(), 3, 0.5f, c.data(), 3)
                  .ok());
  EXPECT_EQ(Download(c), (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
}

TEST_P(Ops, GemmRejectsLeadingDimensionsSmallerThanTheStoredWidth) {
  DeviceBuffer<float> f = Filled(256, 0.0f);
  float* p = f.data();
  // a is (m,k) = (4,5) without transpose: lda must be >= 5; transposed (5,4): >= 4.
  EXPECT_EQ(backend()->Gemm(false, false, 4, 3, 5, 1, p, 4, p, 3, 0, p, 3).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend()->Gemm(true, false, 4, 3, 5, 1, p, 4, p, 3, 0, p, 3).ok());
  // b is (k,n) = (5,3): ldb >= 3; transposed (n,k) = (3,5): ldb >= 5.
  EXPECT_EQ(backend()->Gemm(false, true, 4, 3, 5, 1, p, 5, p, 3, 0, p, 3).code(),
            absl::StatusCode::kInvalidArgument);
  // c is (m,n) = (4,3): ldc >= 3.
  EXPECT_EQ(backend()->Gemm(false, false, 4, 3, 5, 1, p, 5, p, 3, 0, p, 2).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::kernels::testing
