// GEMM and the Conv1D matmul at each MatmulPrecision: fp32 on the CPU and CUDA, and the CUDA
// backend's TF32 and bf16 tensor-core modes (--matmul_precision). Without a GPU the cuda
// instances skip with the reason, as in ops_test.cc.
//
// A fixture of its own rather than more instances of Ops: every op of the Ops suite compares
// against fixed fp32 tolerances, and the attention GEMMs read reduced-precision inputs too, so
// instantiating the whole suite at tf32/bf16 would fail on ops this file does not mean to test.
//
// Tolerances. A GEMM output is a dot product sum_k a_k b_k (plus beta c). With each input rounded
// to a relative error u and fp32 accumulation over k terms, its error is at most
// (2u + u^2 + k 2^-24) * sum_k |a_k b_k| (Higham, Accuracy and Stability, 3.1): relative to the
// magnitude of the terms, not of the result, which may cancel to near zero. So outputs are
// checked against that magnitude, the same expression on absolute values.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/tests/ops_test_util.h"
#include "kernels/tests/reference.h"

namespace dtrain::kernels::testing {
namespace {

class MatmulPrecisionOps : public Ops {};

INSTANTIATE_TEST_SUITE_P(
    Precisions, MatmulPrecisionOps,
    ::testing::Values(DeviceParam{"cpu", "cpu", 0, MatmulPrecision::kFp32},
                      DeviceParam{"cuda", "cuda", 0, MatmulPrecision::kFp32},
                      DeviceParam{"cuda_tf32", "cuda", 0, MatmulPrecision::kTf32},
                      DeviceParam{"cuda_bf16", "cuda", 0, MatmulPrecision::kBf16}),
    [](const ::testing::TestParamInfo<DeviceParam>& info) { return info.param.test_name; });

// Bounds relative to the magnitude of the terms (see the top of the file); k <= 768 here, so
// fp32 accumulation adds at most 768 * 2^-24 = 4.6e-5.
Tolerance GemmTolerance(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::kTf32:
      // TF32 keeps 10 mantissa bits: u = 2^-11 = 4.9e-4 rounding to nearest, so ~1e-3 per
      // product; 2e-3 also covers hardware that truncates to TF32 (u = 2^-10).
      return {1e-6, 2e-3};
    case MatmulPrecision::kBf16:
      // bf16 keeps 7 mantissa bits: u = 2^-8 = 3.9e-3 (our conversion rounds to nearest even),
      // so 7.8e-3 per product, plus the accumulation: ~1e-2.
      return {1e-6, 1e-2};
    case MatmulPrecision::kFp32:
      break;
  }
  return {1e-6, 1e-4};  // inputs exact; fp32 accumulation only
}

struct GemmCase {
  bool trans_a, trans_b;
  int m, n, k;
  int pad;  // extra columns in every leading dimension
  float alpha, beta;
};

// The reference C = alpha op(A) op(B) + beta C from `c`, and the same on absolute values: the
// magnitude of the summed terms that the rounding bound scales with.
struct Bounded {
  Vec want, magnitude;
};
Bounded ReferenceGemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const Vec& a,
                      int lda, const Vec& b, int ldb, double beta, const Vec& c, int ldc) {
  Bounded r{c, Abs(c)};
  reference::Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, r.want, ldc);
  reference::Gemm(trans_a, trans_b, m, n, k, std::abs(alpha), Abs(a), lda, Abs(b), ldb,
                  std::abs(beta), r.magnitude, ldc);
  return r;
}

void ExpectGemmWithinBound(MatmulPrecisionOps& test, const GemmCase& g) {
  SCOPED_TRACE(absl::StrCat("trans_a=", g.trans_a, " trans_b=", g.trans_b, " m=", g.m, " n=", g.n,
                            " k=", g.k, " pad=", g.pad, " alpha=", g.alpha, " beta=", g.beta));
  const int a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const int b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  const int lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
  const std::vector<float> a = RandomFloats(int64_t{a_rows} * lda, 21);
  const std::vector<float> b = RandomFloats(int64_t{b_rows} * ldb, 22);
  const std::vector<float> c = RandomFloats(int64_t{g.m} * ldc, 23);
  DeviceBuffer<float> da = test.Upload(a), db = test.Upload(b), dc = test.Upload(c);
  absl::Status status =
      test.backend()->Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, da.data(), lda, db.data(),
                           ldb, g.beta, dc.data(), ldc);
  ASSERT_TRUE(status.ok()) << status;
  const Bounded r = ReferenceGemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, ToDouble(a), lda,
                                  ToDouble(b), ldb, g.beta, ToDouble(c), ldc);
  EXPECT_TRUE(WithinBound(test.Download(dc), r.want, r.magnitude,
                          GemmTolerance(test.GetParam().precision)));
}

TEST_P(MatmulPrecisionOps, GemmAllTransposesWithinTheRoundingBound) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      ExpectGemmWithinBound(*this, {trans_a, trans_b, 7, 5, 9, /*pad=*/3, 1.5f, 0.5f});
      ExpectGemmWithinBound(*this, {trans_a, trans_b, 13, 1, 6, /*pad=*/2, -1.0f, 1.0f});
      ExpectGemmWithinBound(*this, {trans_a, trans_b, 130, 70, 50, /*pad=*/5, 1.0f, 0.0f});
      ExpectGemmWithinBound(*this, {trans_a, trans_b, 64, 96, 768, /*pad=*/0, 0.5f, 2.0f});
    }
  }
}

// The precision really applies, whatever cuBLAS picks: 1 + 2^-10 is exact in fp32 and in TF32
// (10 mantissa bits) but rounds to 1 in bf16 (7 bits), so a (4,4) @ (4,4) of it times ones gives
// 4 + 2^-8 in fp32 and tf32 and exactly 4 in bf16.
TEST_P(MatmulPrecisionOps, GemmRoundsInputsAsThePrecisionSays) {
  const float x = 1.0f + std::ldexp(1.0f, -10);
  DeviceBuffer<float> a = Filled(16, x), b = Filled(16, 1.0f), c = Garbage(16);
  ASSERT_TRUE(backend()
                  ->Gemm(false, false, 4, 4, 4, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4)
                  .ok());
  const float want = GetParam().precision == MatmulPrecision::kBf16 ? 4.0f : 4.0f * x;
  EXPECT_EQ(Download(c), std::vector<float>(16, want));
}

struct Shape {
  int N, C, OC;
};

::testing::Message Trace(Shape s) {
  return ::testing::Message() << "N=" << s.N << " C=" << s.C << " OC=" << s.OC;
}

// The last two have GPT-2 small's width (768) as the inner dimension of the forward or of the
// input gradient.
const Shape kShapes[] = {{5, 7, 3}, {130, 67, 96}, {64, 256, 768}, {32, 768, 256}};

TEST_P(MatmulPrecisionOps, MatmulForwardWithinTheRoundingBound) {
  const Tolerance tol = GemmTolerance(GetParam().precision);
  for (Shape s : kShapes) {
    SCOPED_TRACE(Trace(s));
    const std::vector<float> inp = RandomFloats(int64_t{s.N} * s.C, 1);
    const std::vector<float> weight = RandomFloats(int64_t{s.C} * s.OC, 2);
    const std::vector<float> bias = RandomFloats(s.OC, 3);
    DeviceBuffer<float> dinp = Upload(inp), dweight = Upload(weight), dbias = Upload(bias);
    DeviceBuffer<float> out = Garbage(int64_t{s.N} * s.OC);
    ASSERT_TRUE(
        backend()
            ->MatmulForward(out.data(), dinp.data(), dweight.data(), dbias.data(), s.N, s.C, s.OC)
            .ok());
    const Vec want =
        reference::Matmul(ToDouble(inp), ToDouble(weight), ToDouble(bias), s.N, s.C, s.OC);
    const Vec magnitude = reference::Matmul(Abs(ToDouble(inp)), Abs(ToDouble(weight)),
                                            Abs(ToDouble(bias)), s.N, s.C, s.OC);
    EXPECT_TRUE(WithinBound(Download(out), want, magnitude, tol));
  }
}

// dinp = dout @ weight^T (overwritten, then accumulated), dweight += inp^T @ dout, and
// dbias += sum_n dout (an fp32 column sum in every mode).
TEST_P(MatmulPrecisionOps, MatmulBackwardWithinTheRoundingBound) {
  const Tolerance tol = GemmTolerance(GetParam().precision);
  for (Shape s : kShapes) {
    SCOPED_TRACE(Trace(s));
    const std::vector<float> inp = RandomFloats(int64_t{s.N} * s.C, 4);
    const std::vector<float> weight = RandomFloats(int64_t{s.C} * s.OC, 5);
    const std::vector<float> dout = RandomFloats(int64_t{s.N} * s.OC, 6);
    const std::vector<float> dweight0 = RandomFloats(int64_t{s.C} * s.OC, 7);
    const std::vector<float> dbias0 = RandomFloats(s.OC, 8);
    DeviceBuffer<float> d_inp = Upload(inp), d_weight = Upload(weight), d_dout = Upload(dout);
    DeviceBuffer<float> dinp = Garbage(int64_t{s.N} * s.C);
    DeviceBuffer<float> dweight = Upload(dweight0), dbias = Upload(dbias0);

    const Bounded r_dinp =
        ReferenceGemm(false, true, s.N, s.C, s.OC, 1.0, ToDouble(dout), s.OC, ToDouble(weight),
                      s.OC, 0.0, Vec(int64_t{s.N} * s.C, 0.0), s.C);
    const Vec& want_dinp = r_dinp.want;
    const Vec& mag_dinp = r_dinp.magnitude;
    ASSERT_TRUE(backend()
                    ->MatmulBackwardInput(dinp.data(), d_dout.data(), d_weight.data(), s.N, s.C,
                                          s.OC, /*accumulate=*/false)
                    .ok());
    EXPECT_TRUE(WithinBound(Download(dinp), want_dinp, mag_dinp, tol));
    ASSERT_TRUE(backend()
                    ->MatmulBackwardInput(dinp.data(), d_dout.data(), d_weight.data(), s.N, s.C,
                                          s.OC, /*accumulate=*/true)
                    .ok());
    EXPECT_TRUE(
        WithinBound(Download(dinp), Plus(want_dinp, want_dinp), Plus(mag_dinp, mag_dinp), tol));

    const Bounded r_dweight = ReferenceGemm(true, false, s.C, s.OC, s.N, 1.0, ToDouble(inp), s.C,
                                            ToDouble(dout), s.OC, 1.0, ToDouble(dweight0), s.OC);
    Vec want_dbias = ToDouble(dbias0), mag_dbias = Abs(ToDouble(dbias0));
    for (int n = 0; n < s.N; ++n) {
      for (int o = 0; o < s.OC; ++o) {
        want_dbias[o] += dout[int64_t{n} * s.OC + o];
        mag_dbias[o] += std::abs(dout[int64_t{n} * s.OC + o]);
      }
    }
    ASSERT_TRUE(backend()
                    ->MatmulBackwardWeight(dweight.data(), dbias.data(), d_dout.data(),
                                           d_inp.data(), s.N, s.C, s.OC)
                    .ok());
    EXPECT_TRUE(WithinBound(Download(dweight), r_dweight.want, r_dweight.magnitude, tol));
    EXPECT_TRUE(
        WithinBound(Download(dbias), want_dbias, mag_dbias, GemmTolerance(MatmulPrecision::kFp32)));
  }
}

}  // namespace
}  // namespace dtrain::kernels::testing
