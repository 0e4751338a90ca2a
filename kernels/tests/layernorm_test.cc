// LayerNorm (eps 1e-5): out (N,C) = (inp - mean) * rstd * weight + bias, mean and rstd (N) saved;
// the backward accumulates into dinp, dweight and dbias.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tests/ops_test_util.h"
#include "kernels/tests/reference.h"

namespace dtrain::kernels::testing {
namespace {

struct Shape {
  int N, C;
};

struct Inputs {
  explicit Inputs(Shape s)
      : s(s),
        inp(RandomFloats(int64_t{s.N} * s.C, 21, 2.0f)),
        weight(RandomFloats(s.C, 22)),
        bias(RandomFloats(s.C, 23)),
        dout(RandomFloats(int64_t{s.N} * s.C, 24)) {
    // Offset rows so the mean matters.
    for (int64_t i = 0; i < int64_t{s.N} * s.C; ++i) inp[i] += 0.5f * (i / s.C);
  }

  Vec Forward(const Vec& x, const Vec& w, const Vec& b) const {
    return reference::LayerNorm(x, w, b, s.N, s.C).out;
  }

  Shape s;
  std::vector<float> inp, weight, bias, dout;
};

::testing::Message Trace(Shape s) { return ::testing::Message() << "N=" << s.N << " C=" << s.C; }

TEST_P(Ops, LayerNormForwardMatchesReference) {
  for (Shape s : {Shape{5, 13}, Shape{1, 8}, Shape{3, 1}, Shape{64, 256}, Shape{7, 771}}) {
    SCOPED_TRACE(Trace(s));
    const Inputs in(s);
    DeviceBuffer<float> inp = Upload(in.inp), weight = Upload(in.weight), bias = Upload(in.bias);
    DeviceBuffer<float> out = Garbage(int64_t{s.N} * s.C), mean = Garbage(s.N);
    DeviceBuffer<float> rstd = Garbage(s.N);
    ASSERT_TRUE(backend()
                    ->LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(),
                                       weight.data(), bias.data(), s.N, s.C)
                    .ok());
    const reference::LayerNormResult want =
        reference::LayerNorm(ToDouble(in.inp), ToDouble(in.weight), ToDouble(in.bias), s.N, s.C);
    EXPECT_TRUE(AllNear(Download(out), want.out, kForwardTol));
    EXPECT_TRUE(AllNear(Download(mean), want.mean, kForwardTol));
    EXPECT_TRUE(AllNear(Download(rstd), want.rstd, kForwardTol));
  }
}

// One channel: every row normalizes to 0, so out = bias whatever the input.
TEST_P(Ops, LayerNormOfOneChannelGivesTheBias) {
  DeviceBuffer<float> inp = Upload(std::vector<float>{3.0f, -7.0f}), weight = Filled(1, 2.0f);
  DeviceBuffer<float> bias = Filled(1, 0.25f), out = Garbage(2), mean = Garbage(2);
  DeviceBuffer<float> rstd = Garbage(2);
  ASSERT_TRUE(backend()
                  ->LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(),
                                     weight.data(), bias.data(), 2, 1)
                  .ok());
  EXPECT_EQ(Download(out), (std::vector<float>{0.25f, 0.25f}));
  EXPECT_EQ(Download(mean), (std::vector<float>{3.0f, -7.0f}));
}

// Gradients of sum(out * dout) with respect to inp, weight and bias, each added to what the
// buffer held before (all three accumulate).
TEST_P(Ops, LayerNormBackwardMatchesFiniteDifferencesAndAccumulates) {
  for (Shape s : {Shape{5, 13}, Shape{1, 8}, Shape{3, 1}, Shape{2, 40}}) {
    SCOPED_TRACE(Trace(s));
    const Inputs in(s);
    DeviceBuffer<float> inp = Upload(in.inp), weight = Upload(in.weight), bias = Upload(in.bias);
    DeviceBuffer<float> out = Garbage(int64_t{s.N} * s.C), mean = Garbage(s.N);
    DeviceBuffer<float> rstd = Garbage(s.N), dout = Upload(in.dout);
    const std::vector<float> dinp0 = RandomFloats(int64_t{s.N} * s.C, 25);
    const std::vector<float> dweight0 = RandomFloats(s.C, 26), dbias0 = RandomFloats(s.C, 27);
    DeviceBuffer<float> dinp = Upload(dinp0), dweight = Upload(dweight0), dbias = Upload(dbias0);
    ASSERT_TRUE(backend()
                    ->LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(),
                                       weight.data(), bias.data(), s.N, s.C)
                    .ok());
    ASSERT_TRUE(backend()
                    ->LayerNormBackward(dinp.data(), dweight.data(), dbias.data(), dout.data(),
                                        inp.data(), weight.data(), mean.data(), rstd.data(), s.N,
                                        s.C)
                    .ok());
    const Vec x = ToDouble(in.inp), w = ToDouble(in.weight), b = ToDouble(in.bias);
    const Vec dy = ToDouble(in.dout);
    const Vec want_dinp =
        NumericalGradient([&](const Vec& v) { return in.Forward(v, w, b); }, x, dy);
    const Vec want_dweight =
        NumericalGradient([&](const Vec& v) { return in.Forward(x, v, b); }, w, dy);
    const Vec want_dbias =
        NumericalGradient([&](const Vec& v) { return in.Forward(x, w, v); }, b, dy);
    EXPECT_TRUE(AllNear(Download(dinp), Plus(ToDouble(dinp0), want_dinp), kGradientTol));
    EXPECT_TRUE(AllNear(Download(dweight), Plus(ToDouble(dweight0), want_dweight), kGradientTol));
    EXPECT_TRUE(AllNear(Download(dbias), Plus(ToDouble(dbias0), want_dbias), kGradientTol));
  }
}

// At GPT-2's width and enough rows to split across threads: directional derivatives.
TEST_P(Ops, LayerNormBackwardAtModelWidthMatchesDirectionalDerivatives) {
  const Shape s{67, 256};
  const Inputs in(s);
  DeviceBuffer<float> inp = Upload(in.inp), weight = Upload(in.weight), bias = Upload(in.bias);
  DeviceBuffer<float> out = Garbage(int64_t{s.N} * s.C), mean = Garbage(s.N);
  DeviceBuffer<float> rstd = Garbage(s.N), dout = Upload(in.dout);
  DeviceBuffer<float> dinp = Filled(int64_t{s.N} * s.C, 0.0f), dweight = Filled(s.C, 0.0f);
  DeviceBuffer<float> dbias = Filled(s.C, 0.0f);
  ASSERT_TRUE(backend()
                  ->LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(),
                                     weight.data(), bias.data(), s.N, s.C)
                  .ok());
  ASSERT_TRUE(backend()
                  ->LayerNormBackward(dinp.data(), dweight.data(), dbias.data(), dout.data(),
                                      inp.data(), weight.data(), mean.data(), rstd.data(), s.N, s.C)
                  .ok());
  const Vec x = ToDouble(in.inp), w = ToDouble(in.weight), b = ToDouble(in.bias);
  const Vec dy = ToDouble(in.dout);
  for (uint32_t seed : {1u, 2u, 3u}) {
    const DirectionalCheck dx = DirectionalDerivative(
        [&](const Vec& v) { return in.Forward(v, w, b); }, x, dy, Download(dinp), seed);
    EXPECT_NEAR(dx.analytic, dx.numerical, 1e-3 * (1.0 + std::abs(dx.numerical)));
    const DirectionalCheck dw = DirectionalDerivative(
        [&](const Vec& v) { return in.Forward(x, v, b); }, w, dy, Download(dweight), seed);
    EXPECT_NEAR(dw.analytic, dw.numerical, 1e-3 * (1.0 + std::abs(dw.numerical)));
    const DirectionalCheck db = DirectionalDerivative(
        [&](const Vec& v) { return in.Forward(x, w, v); }, b, dy, Download(dbias), seed);
    EXPECT_NEAR(db.analytic, db.numerical, 1e-3 * (1.0 + std::abs(db.numerical)));
  }
}

}  // namespace
}  // namespace dtrain::kernels::testing
