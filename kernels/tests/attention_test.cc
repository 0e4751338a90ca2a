// Causal self-attention: qkv (B,T,3C) -> out (B,T,C) and att (B,NH,T,T), softmax(q k^T/sqrt(hs))
// with zeros above the diagonal; the backward overwrites dqkv and uses scratch as workspace.
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tests/ops_test_util.h"
#include "kernels/tests/reference.h"

namespace dtrain::kernels::testing {
namespace {

struct Shape {
  int B, T, C, NH;
};

::testing::Message Trace(Shape s) {
  return ::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH
                              << " hs=" << s.C / s.NH;
}

// Small enough for one finite difference per qkv element: odd head sizes, T = 1, hs = 1, and
// T = 37, which the CPU backend cuts into a full 32-row block of scores and a partial one.
const Shape kSmallShapes[] = {
    {2, 5, 12, 3}, {1, 1, 4, 1}, {2, 7, 15, 3}, {1, 4, 8, 8}, {1, 37, 4, 2}};
// Large enough for the CPU backend to spread (b,h) pairs over threads, with T = 64.
const Shape kLargeShape = {3, 64, 64, 4};

struct Outputs {
  std::vector<float> qkv, dout;
  DeviceBuffer<float> out, att, dqkv;
};

// Forward, then backward with dout, on the backend. Outputs start as NaN: they must be written.
Outputs ForwardBackward(Ops& test, Shape s) {
  const int64_t rows = int64_t{s.B} * s.T;
  const int64_t att_size = int64_t{s.B} * s.NH * s.T * s.T;
  Outputs r{RandomFloats(rows * 3 * s.C, 61), RandomFloats(rows * s.C, 62),
            test.Garbage(rows * s.C), test.Garbage(att_size), test.Garbage(rows * 3 * s.C)};
  DeviceBuffer<float> qkv = test.Upload(r.qkv), dout = test.Upload(r.dout);
  DeviceBuffer<float> scratch = test.Garbage(att_size);
  absl::Status status =
      test.backend()->AttentionForward(r.out.data(), r.att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  EXPECT_TRUE(status.ok()) << status;
  status = test.backend()->AttentionBackward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                             r.att.data(), s.B, s.T, s.C, s.NH);
  EXPECT_TRUE(status.ok()) << status;
  return r;
}

TEST_P(Ops, AttentionForwardMatchesReference) {
  std::vector<Shape> shapes(std::begin(kSmallShapes), std::end(kSmallShapes));
  shapes.push_back(kLargeShape);
  for (Shape s : shapes) {
    SCOPED_TRACE(Trace(s));
    const Outputs r = ForwardBackward(*this, s);
    const reference::AttentionResult want =
        reference::Attention(ToDouble(r.qkv), s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(AllNear(Download(r.out), want.out, kForwardTol));
    EXPECT_TRUE(AllNear(Download(r.att), want.att, kForwardTol));  // zeros above the diagonal
  }
}

TEST_P(Ops, AttentionBackwardMatchesFiniteDifferences) {
  for (Shape s : kSmallShapes) {
    SCOPED_TRACE(Trace(s));
    const Outputs r = ForwardBackward(*this, s);
    const Vec want = NumericalGradient(
        [&](const Vec& qkv) { return reference::Attention(qkv, s.B, s.T, s.C, s.NH).out; },
        ToDouble(r.qkv), ToDouble(r.dout));
    EXPECT_TRUE(AllNear(Download(r.dqkv), want, kGradientTol));
  }
}

TEST_P(Ops, AttentionBackwardAtScaleMatchesDirectionalDerivatives) {
  const Shape s = kLargeShape;
  const Outputs r = ForwardBackward(*this, s);
  const std::vector<float> dqkv = Download(r.dqkv);
  for (uint32_t seed : {1u, 2u, 3u}) {
    const DirectionalCheck check = DirectionalDerivative(
        [&](const Vec& qkv) { return reference::Attention(qkv, s.B, s.T, s.C, s.NH).out; },
        ToDouble(r.qkv), ToDouble(r.dout), dqkv, seed);
    EXPECT_NEAR(check.analytic, check.numerical, 1e-3 * (1.0 + std::abs(check.numerical)))
        << "seed " << seed;
  }
}

// Position t attends to positions <= t only: changing the last position's q, k, v leaves every
// earlier output unchanged.
TEST_P(Ops, AttentionIsCausal) {
  const Shape s{1, 6, 8, 2};
  std::vector<float> qkv = RandomFloats(s.T * 3 * s.C, 63);
  DeviceBuffer<float> d_qkv = Upload(qkv), out = Garbage(s.T * s.C);
  DeviceBuffer<float> att = Garbage(s.NH * s.T * s.T);
  ASSERT_TRUE(
      backend()->AttentionForward(out.data(), att.data(), d_qkv.data(), s.B, s.T, s.C, s.NH).ok());
  const std::vector<float> before = Download(out);
  for (int i = (s.T - 1) * 3 * s.C; i < s.T * 3 * s.C; ++i) qkv[i] += 10.0f;
  d_qkv = Upload(qkv);
  ASSERT_TRUE(
      backend()->AttentionForward(out.data(), att.data(), d_qkv.data(), s.B, s.T, s.C, s.NH).ok());
  const std::vector<float> after = Download(out);
  const int earlier = (s.T - 1) * s.C;
  EXPECT_EQ(std::vector<float>(before.begin(), before.begin() + earlier),
            std::vector<float>(after.begin(), after.begin() + earlier));
  EXPECT_NE(std::vector<float>(before.begin() + earlier, before.end()),
            std::vector<float>(after.begin() + earlier, after.end()));
}

}  // namespace
}  // namespace dtrain::kernels::testing
