// Element-wise ops: GELU (tanh approximation) and the residual add.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tests/ops_test_util.h"
#include "kernels/tests/reference.h"

namespace dtrain::kernels::testing {
namespace {

// -8 .. 8 in uneven steps, plus exact zero; n = 1001 is not a multiple of any vector width.
std::vector<float> GeluInputs() {
  std::vector<float> x(1001);
  for (int i = 0; i < 1001; ++i) x[i] = -8.0f + 16.0f * i / 1000.0f + 0.001f * (i % 7);
  x[500] = 0.0f;
  return x;
}

TEST_P(Ops, GeluForwardMatchesReference) {
  for (const std::vector<float>& x :
       {GeluInputs(), std::vector<float>{0.5f}, RandomFloats((1 << 20) + 3, 41, 3.0f)}) {
    SCOPED_TRACE(::testing::Message() << "n=" << x.size());
    DeviceBuffer<float> inp = Upload(x), out = Garbage(x.size());
    ASSERT_TRUE(backend()->GeluForward(out.data(), inp.data(), x.size()).ok());
    EXPECT_TRUE(AllNear(Download(out), reference::Gelu(ToDouble(x)), kForwardTol));
  }
}

TEST_P(Ops, GeluForwardInPlace) {
  const std::vector<float> x = GeluInputs();
  DeviceBuffer<float> buf = Upload(x);
  ASSERT_TRUE(backend()->GeluForward(buf.data(), buf.data(), x.size()).ok());
  EXPECT_TRUE(AllNear(Download(buf), reference::Gelu(ToDouble(x)), kForwardTol));
}

// dinp = gelu'(inp) * dout, overwriting dinp.
TEST_P(Ops, GeluBackwardMatchesFiniteDifferences) {
  const std::vector<float> x = GeluInputs();
  const std::vector<float> dy = RandomFloats(x.size(), 42);
  DeviceBuffer<float> inp = Upload(x), dout = Upload(dy), dinp = Garbage(x.size());
  ASSERT_TRUE(backend()->GeluBackward(dinp.data(), inp.data(), dout.data(), x.size()).ok());
  // Element-wise, so the finite difference of element i only needs element i.
  Vec want(x.size());
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const Vec f = reference::Gelu({x[i] + h, x[i] - h});
    want[i] = (f[0] - f[1]) / (2 * h) * dy[i];
  }
  EXPECT_TRUE(AllNear(Download(dinp), want, kGradientTol));
}

TEST_P(Ops, GeluBackwardAtScaleMatchesFiniteDifferences) {
  const std::vector<float> x = RandomFloats((1 << 20) + 3, 43, 3.0f);
  const std::vector<float> dy = RandomFloats(x.size(), 44);
  DeviceBuffer<float> inp = Upload(x), dout = Upload(dy), dinp = Garbage(x.size());
  ASSERT_TRUE(backend()->GeluBackward(dinp.data(), inp.data(), dout.data(), x.size()).ok());
  const Vec want = reference::GeluBackwardByDifferences(ToDouble(x), ToDouble(dy));
  EXPECT_TRUE(AllNear(Download(dinp), want, kGradientTol));
}

TEST_P(Ops, ResidualForwardAdds) {
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{1 << 20} + 5}) {
    const std::vector<float> a = RandomFloats(n, 51), b = RandomFloats(n, 52);
    DeviceBuffer<float> da = Upload(a), db = Upload(b), out = Garbage(n);
    ASSERT_TRUE(backend()->ResidualForward(out.data(), da.data(), db.data(), n).ok());
    EXPECT_TRUE(AllNear(Download(out), Plus(ToDouble(a), ToDouble(b)), kForwardTol)) << n;
  }
}

// Both inputs' gradients accumulate: da += dout, db += dout.
TEST_P(Ops, ResidualBackwardAccumulatesIntoBothInputs) {
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{1 << 20} + 5}) {
    const std::vector<float> da0 = RandomFloats(n, 53), db0 = RandomFloats(n, 54);
    const std::vector<float> dy = RandomFloats(n, 55);
    DeviceBuffer<float> da = Upload(da0), db = Upload(db0), dout = Upload(dy);
    ASSERT_TRUE(backend()->ResidualBackward(da.data(), db.data(), dout.data(), n).ok());
    EXPECT_TRUE(AllNear(Download(da), Plus(ToDouble(da0), ToDouble(dy)), kForwardTol)) << n;
    EXPECT_TRUE(AllNear(Download(db), Plus(ToDouble(db0), ToDouble(dy)), kForwardTol)) << n;
  }
}

// The same gradients from central differences of the forward (a + b), as every other op's
// backward is checked: the closed form above could share a mistake with the kernel.
TEST_P(Ops, ResidualBackwardMatchesFiniteDifferences) {
  const int64_t n = 257;
  const std::vector<float> a = RandomFloats(n, 56), b = RandomFloats(n, 57);
  const std::vector<float> dy = RandomFloats(n, 58);
  const std::vector<float> da0 = RandomFloats(n, 59), db0 = RandomFloats(n, 60);
  DeviceBuffer<float> da = Upload(da0), db = Upload(db0), dout = Upload(dy);
  ASSERT_TRUE(backend()->ResidualBackward(da.data(), db.data(), dout.data(), n).ok());
  const Vec va = ToDouble(a), vb = ToDouble(b);
  const Vec want_da =
      NumericalGradient([&](const Vec& v) { return Plus(v, vb); }, va, ToDouble(dy));
  const Vec want_db =
      NumericalGradient([&](const Vec& v) { return Plus(va, v); }, vb, ToDouble(dy));
  EXPECT_TRUE(AllNear(Download(da), Plus(ToDouble(da0), want_da), kGradientTol));
  EXPECT_TRUE(AllNear(Download(db), Plus(ToDouble(db0), want_db), kGradientTol));
}

}  // namespace
}  // namespace dtrain::kernels::testing
