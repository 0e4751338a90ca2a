// Matmul: out (N,OC) = inp (N,C) @ weight (C,OC) + bias (OC); the backward is split into the input
// gradient (overwrites, or accumulates when asked) and the weight gradient (always accumulates).
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tests/ops_test_util.h"
#include "kernels/tests/reference.h"

namespace dtrain::kernels::testing {
namespace {

struct Shape {
  int N, C, OC;
};

// Small shapes for finite differences: odd sizes, single rows and channels.
const Shape kSmallShapes[] = {{5, 7, 3}, {1, 1, 1}, {3, 13, 9}, {1, 9, 17}};

struct Inputs {
  explicit Inputs(Shape s)
      : s(s),
        inp(RandomFloats(int64_t{s.N} * s.C, 1)),
        weight(RandomFloats(int64_t{s.C} * s.OC, 2)),
        bias(RandomFloats(s.OC, 3)),
        dout(RandomFloats(int64_t{s.N} * s.OC, 4)) {}

  Vec Forward(const Vec& x, const Vec& w, const Vec& b) const {
    return reference::Matmul(x, w, b, s.N, s.C, s.OC);
  }

  Shape s;
  std::vector<float> inp, weight, bias, dout;
};

::testing::Message Trace(Shape s) {
  return ::testing::Message() << "N=" << s.N << " C=" << s.C << " OC=" << s.OC;
}

TEST_P(Ops, MatmulForwardMatchesReference) {
  // The last shape is large enough for the CPU backend to split the GEMM across threads.
  for (Shape s : {Shape{5, 7, 3}, Shape{1, 1, 1}, Shape{3, 13, 9}, Shape{130, 67, 96}}) {
    SCOPED_TRACE(Trace(s));
    const Inputs in(s);
    DeviceBuffer<float> inp = Upload(in.inp), weight = Upload(in.weight), bias = Upload(in.bias);
    DeviceBuffer<float> out = Garbage(int64_t{s.N} * s.OC);
    ASSERT_TRUE(
        backend()
            ->MatmulForward(out.data(), inp.data(), weight.data(), bias.data(), s.N, s.C, s.OC)
            .ok());
    EXPECT_TRUE(AllNear(Download(out),
                        in.Forward(ToDouble(in.inp), ToDouble(in.weight), ToDouble(in.bias)),
                        kForwardTol));
    // A null bias means no bias.
    ASSERT_TRUE(backend()
                    ->MatmulForward(out.data(), inp.data(), weight.data(), nullptr, s.N, s.C, s.OC)
                    .ok());
    EXPECT_TRUE(
        AllNear(Download(out), in.Forward(ToDouble(in.inp), ToDouble(in.weight), {}), kForwardTol));
  }
}

TEST_P(Ops, MatmulBackwardInputMatchesFiniteDifferences) {
  for (Shape s : kSmallShapes) {
    SCOPED_TRACE(Trace(s));
    const Inputs in(s);
    DeviceBuffer<float> dout = Upload(in.dout), weight = Upload(in.weight);
    DeviceBuffer<float> dinp = Garbage(int64_t{s.N} * s.C);  // overwritten, never read
    ASSERT_TRUE(backend()
                    ->MatmulBackwardInput(dinp.data(), dout.data(), weight.data(), s.N, s.C, s.OC,
                                          /*accumulate=*/false)
                    .ok());
    const Vec want = NumericalGradient(
        [&](const Vec& x) { return in.Forward(x, ToDouble(in.weight), ToDouble(in.bias)); },
        ToDouble(in.inp), ToDouble(in.dout));
    EXPECT_TRUE(AllNear(Download(dinp), want, kGradientTol));
  }
}

TEST_P(Ops, MatmulBackwardInputAccumulatesWhenAsked) {
  const Inputs in({4, 6, 5});
  const std::vector<float> initial = RandomFloats(4 * 6, 9);
  DeviceBuffer<float> dout = Upload(in.dout), weight = Upload(in.weight), dinp = Upload(initial);
  ASSERT_TRUE(backend()
                  ->MatmulBackwardInput(dinp.data(), dout.data(), weight.data(), 4, 6, 5,
                                        /*accumulate=*/true)
                  .ok());
  const Vec grad =
      NumericalGradient([&](const Vec& x) { return in.Forward(x, ToDouble(in.weight), {}); },
                        ToDouble(in.inp), ToDouble(in.dout));
  EXPECT_TRUE(AllNear(Download(dinp), Plus(ToDouble(initial), grad), kGradientTol));
}

TEST_P(Ops, MatmulBackwardWeightMatchesFiniteDifferencesAndAccumulates) {
  for (Shape s : kSmallShapes) {
    SCOPED_TRACE(Trace(s));
    const Inputs in(s);
    const std::vector<float> dweight0 = RandomFloats(int64_t{s.C} * s.OC, 7);
    const std::vector<float> dbias0 = RandomFloats(s.OC, 8);
    DeviceBuffer<float> dout = Upload(in.dout), inp = Upload(in.inp);
    DeviceBuffer<float> dweight = Upload(dweight0), dbias = Upload(dbias0);
    ASSERT_TRUE(backend()
                    ->MatmulBackwardWeight(dweight.data(), dbias.data(), dout.data(), inp.data(),
                                           s.N, s.C, s.OC)
                    .ok());
    const Vec want_dweight = NumericalGradient(
        [&](const Vec& w) { return in.Forward(ToDouble(in.inp), w, ToDouble(in.bias)); },
        ToDouble(in.weight), ToDouble(in.dout));
    const Vec want_dbias = NumericalGradient(
        [&](const Vec& b) { return in.Forward(ToDouble(in.inp), ToDouble(in.weight), b); },
        ToDouble(in.bias), ToDouble(in.dout));
    EXPECT_TRUE(AllNear(Download(dweight), Plus(ToDouble(dweight0), want_dweight), kGradientTol));
    EXPECT_TRUE(AllNear(Download(dbias), Plus(ToDouble(dbias0), want_dbias), kGradientTol));
  }
}

TEST_P(Ops, MatmulBackwardWeightWithNullBiasGradientSkipsIt) {
  const Inputs in({3, 4, 5});
  DeviceBuffer<float> dout = Upload(in.dout), inp = Upload(in.inp);
  DeviceBuffer<float> dweight = Filled(4 * 5, 0.0f);
  ASSERT_TRUE(backend()
                  ->MatmulBackwardWeight(dweight.data(), nullptr, dout.data(), inp.data(), 3, 4, 5)
                  .ok());
  const Vec want =
      NumericalGradient([&](const Vec& w) { return in.Forward(ToDouble(in.inp), w, {}); },
                        ToDouble(in.weight), ToDouble(in.dout));
  EXPECT_TRUE(AllNear(Download(dweight), want, kGradientTol));
}

// At a size the CPU backend splits across threads, against the closed forms
// dinp = dout @ weight^T, dweight = inp^T @ dout, dbias = sum_n dout (finite differences would
// take too long here; the small shapes above pin the closed forms down).
TEST_P(Ops, MatmulBackwardLargeShapeMatchesClosedForm) {
  const Shape s{130, 67, 96};
  const Inputs in(s);
  DeviceBuffer<float> dout = Upload(in.dout), inp = Upload(in.inp), weight = Upload(in.weight);
  DeviceBuffer<float> dinp = Garbage(int64_t{s.N} * s.C);
  DeviceBuffer<float> dweight = Filled(int64_t{s.C} * s.OC, 0.0f), dbias = Filled(s.OC, 0.0f);
  ASSERT_TRUE(
      backend()
          ->MatmulBackwardInput(dinp.data(), dout.data(), weight.data(), s.N, s.C, s.OC, false)
          .ok());
  ASSERT_TRUE(backend()
                  ->MatmulBackwardWeight(dweight.data(), dbias.data(), dout.data(), inp.data(), s.N,
                                         s.C, s.OC)
                  .ok());
  Vec want_dinp(int64_t{s.N} * s.C), want_dweight(int64_t{s.C} * s.OC), want_dbias(s.OC, 0.0);
  reference::Gemm(false, true, s.N, s.C, s.OC, 1.0, ToDouble(in.dout), s.OC, ToDouble(in.weight),
                  s.OC, 0.0, want_dinp, s.C);
  reference::Gemm(true, false, s.C, s.OC, s.N, 1.0, ToDouble(in.inp), s.C, ToDouble(in.dout), s.OC,
                  0.0, want_dweight, s.OC);
  for (int n = 0; n < s.N; ++n) {
    for (int o = 0; o < s.OC; ++o) want_dbias[o] += in.dout[int64_t{n} * s.OC + o];
  }
  EXPECT_TRUE(AllNear(Download(dinp), want_dinp, kForwardTol));
  EXPECT_TRUE(AllNear(Download(dweight), want_dweight, kForwardTol));
  EXPECT_TRUE(AllNear(Download(dbias), want_dbias, kForwardTol));
}

}  // namespace
}  // namespace dtrain::kernels::testing
