// The optimizer step: AdamW (torch.optim.AdamW semantics), SquaredNorm and Scale.
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tests/ops_test_util.h"
#include "kernels/tests/reference.h"

namespace dtrain::kernels::testing {
namespace {

// Three steps with weight decay and a gradient scale, against the closed-form update in double.
// m and v carry over between steps; each step's bias correction uses its own step count.
TEST_P(Ops, AdamWMatchesTorchClosedFormOverSteps) {
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{1 << 18} + 3}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::vector<float> params = RandomFloats(n, 81);
    DeviceBuffer<float> d_params = Upload(params), m = Filled(n, 0.0f), v = Filled(n, 0.0f);
    Vec want_params = ToDouble(params), want_m(n, 0.0), want_v(n, 0.0);
    AdamWParams p;
    p.lr = 1e-2f;
    p.beta1 = 0.9f;
    p.beta2 = 0.95f;
    p.eps = 1e-8f;
    p.weight_decay = 0.1f;
    p.grad_scale = 0.5f;
    for (int step = 1; step <= 3; ++step) {
      const std::vector<float> grads = RandomFloats(n, 81 + step, 0.1f);
      DeviceBuffer<float> d_grads = Upload(grads);
      p.step = step;
      ASSERT_TRUE(
          backend()->AdamWUpdate(d_params.data(), d_grads.data(), m.data(), v.data(), n, p).ok());
      reference::AdamW(want_params, ToDouble(grads), want_m, want_v, p.lr, p.beta1, p.beta2, p.eps,
                       p.weight_decay, step, p.grad_scale);
    }
    EXPECT_TRUE(AllNear(Download(d_params), want_params, {1e-6, 1e-5}));
    EXPECT_TRUE(AllNear(Download(m), want_m, {1e-8, 1e-5}));
    EXPECT_TRUE(AllNear(Download(v), want_v, {1e-10, 1e-5}));
  }
}

// At step 1 with zero state, m/sqrt(v) = sign(g): every parameter moves by lr (times the decay).
TEST_P(Ops, AdamWFirstStepMovesEachParameterByLearningRate) {
  DeviceBuffer<float> params = Upload(std::vector<float>{1.0f, 1.0f, -2.0f});
  DeviceBuffer<float> grads = Upload(std::vector<float>{3.0f, -0.5f, 1e-3f});
  DeviceBuffer<float> m = Filled(3, 0.0f), v = Filled(3, 0.0f);
  AdamWParams p;
  p.lr = 0.1f;
  p.eps = 0.0f;
  ASSERT_TRUE(backend()->AdamWUpdate(params.data(), grads.data(), m.data(), v.data(), 3, p).ok());
  EXPECT_TRUE(AllNear(Download(params), {0.9, 1.1, -2.1}, {1e-6, 1e-6}));
}

// Sums of squares of multiples of 1/4 are exact in double, in any order and on any device.
TEST_P(Ops, SquaredNormIsExactOnExactlyRepresentableInputs) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
    std::vector<float> x(n);
    double want = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i % 17 - 8) / 4.0f;
      want += double{x[i]} * x[i];
    }
    DeviceBuffer<float> d = Upload(x);
    absl::StatusOr<double> got = backend()->SquaredNorm(d.data(), n);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want) << "n=" << n;
  }
}

// Accumulated in double: 2^24 + 1 ones would stop growing at 2^24 in float.
TEST_P(Ops, SquaredNormAccumulatesInDouble) {
  const int64_t n = (int64_t{1} << 24) + 1;
  DeviceBuffer<float> ones = Filled(n, 1.0f);
  absl::StatusOr<double> got = backend()->SquaredNorm(ones.data(), n);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, static_cast<double>(n));
}

TEST_P(Ops, ScaleMultipliesEveryElement) {
  for (int64_t n : {int64_t{1}, int64_t{1001}}) {
    const std::vector<float> x = RandomFloats(n, 91);
    DeviceBuffer<float> d = Upload(x);
    ASSERT_TRUE(backend()->Scale(d.data(), 0.25f, n).ok());
    Vec want = ToDouble(x);
    for (double& w : want) w *= 0.25;
    EXPECT_TRUE(AllNear(Download(d), want, {0.0, 0.0})) << n;  // a power of two: exact
  }
}

}  // namespace
}  // namespace dtrain::kernels::testing
