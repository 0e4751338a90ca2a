// Fused softmax + cross-entropy: probs (N,V) = softmax(logits), losses (N) = -log probs[target];
// backward dlogits = (probs - onehot(target)) * dloss, overwriting dlogits.
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tests/ops_test_util.h"
#include "kernels/tests/reference.h"

namespace dtrain::kernels::testing {
namespace {

struct Shape {
  int N, V;
  float scale;  // logits ~ N(0, scale^2)
};

::testing::Message Trace(Shape s) {
  return ::testing::Message() << "N=" << s.N << " V=" << s.V << " scale=" << s.scale;
}

struct Outputs {
  std::vector<float> logits;
  std::vector<int32_t> targets;
  DeviceBuffer<float> losses, probs, dlogits;
};

Outputs ForwardBackward(Ops& test, Shape s, float dloss) {
  Outputs r{RandomFloats(int64_t{s.N} * s.V, 71, s.scale), RandomInts(s.N, 72, s.V),
            test.Garbage(s.N), test.Garbage(int64_t{s.N} * s.V), test.Garbage(int64_t{s.N} * s.V)};
  DeviceBuffer<float> logits = test.Upload(r.logits);
  DeviceBuffer<int32_t> targets = test.Upload(r.targets);
  absl::Status status = test.backend()->CrossEntropyForward(
      r.losses.data(), r.probs.data(), logits.data(), targets.data(), s.N, s.V);
  EXPECT_TRUE(status.ok()) << status;
  status = test.backend()->CrossEntropyBackward(r.dlogits.data(), r.probs.data(), targets.data(),
                                                dloss, s.N, s.V);
  EXPECT_TRUE(status.ok()) << status;
  return r;
}

// Includes V = 1 (loss 0), V not a multiple of 8, logits of magnitude ~1000 (a naive softmax
// overflows), and GPT-2's reference shape.
TEST_P(Ops, CrossEntropyForwardMatchesReference) {
  for (Shape s :
       {Shape{5, 11, 1.0f}, Shape{1, 1, 1.0f}, Shape{3, 7, 1000.0f}, Shape{1024, 256, 3.0f}}) {
    SCOPED_TRACE(Trace(s));
    const Outputs r = ForwardBackward(*this, s, 1.0f);
    const reference::CrossEntropyResult want =
        reference::CrossEntropy(ToDouble(r.logits), r.targets, s.N, s.V);
    EXPECT_TRUE(AllNear(Download(r.probs), want.probs, kForwardTol));
    EXPECT_TRUE(AllNear(Download(r.losses), want.losses, kForwardTol));
  }
}

TEST_P(Ops, CrossEntropyBackwardMatchesFiniteDifferences) {
  for (Shape s : {Shape{5, 11, 1.0f}, Shape{1, 1, 1.0f}, Shape{4, 33, 2.0f}}) {
    SCOPED_TRACE(Trace(s));
    const float dloss = 1.0f / s.N;
    const Outputs r = ForwardBackward(*this, s, dloss);
    // Gradient of dloss * sum_n losses[n].
    const Vec want = NumericalGradient(
        [&](const Vec& logits) {
          return reference::CrossEntropy(logits, r.targets, s.N, s.V).losses;
        },
        ToDouble(r.logits), Vec(s.N, dloss));
    EXPECT_TRUE(AllNear(Download(r.dlogits), want, kGradientTol));
  }
}

TEST_P(Ops, CrossEntropyBackwardAtModelShapeMatchesClosedForm) {
  const Shape s{1024, 256, 3.0f};
  const float dloss = 1.0f / s.N;
  const Outputs r = ForwardBackward(*this, s, dloss);
  const reference::CrossEntropyResult ref =
      reference::CrossEntropy(ToDouble(r.logits), r.targets, s.N, s.V);
  Vec want(ref.probs.size());
  for (int n = 0; n < s.N; ++n) {
    for (int v = 0; v < s.V; ++v) {
      const int64_t i = int64_t{n} * s.V + v;
      want[i] = (ref.probs[i] - (v == r.targets[n] ? 1.0 : 0.0)) * dloss;
    }
  }
  // Entries are ~dloss = 1e-3 in size, so the absolute tolerance scales with it.
  EXPECT_TRUE(AllNear(Download(r.dlogits), want, {1e-5 * dloss, 1e-4}));
}

TEST_P(Ops, CrossEntropyRejectsTargetsOutsideTheVocabularyOnCpu) {
  if (!IsCpu()) GTEST_SKIP() << "target values are only validated by the CPU backend";
  DeviceBuffer<float> f = Filled(64, 0.0f);
  for (int32_t bad : {-1, 4}) {
    DeviceBuffer<int32_t> targets = Upload(std::vector<int32_t>{0, bad});
    absl::Status status =
        backend()->CrossEntropyForward(f.data(), f.data(), f.data(), targets.data(), 2, 4);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    status = backend()->CrossEntropyBackward(f.data(), f.data(), targets.data(), 1.0f, 2, 4);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("targets[1]"), absl::string_view::npos) << status;
  }
}

}  // namespace
}  // namespace dtrain::kernels::testing
