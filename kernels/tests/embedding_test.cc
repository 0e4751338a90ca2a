// Embedding: out (B,T,C) = wte[tokens[b,t]] + wpe[t]; the backward adds into dwte and dwpe, rows
// of repeated tokens summing into the same dwte row.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tests/ops_test_util.h"
#include "kernels/tests/reference.h"

namespace dtrain::kernels::testing {
namespace {

struct Shape {
  int B, T, C, V;
  int extra_positions;  // wpe has T + extra_positions rows (a model's max T may exceed this T)
};

struct Inputs {
  explicit Inputs(Shape s)
      : s(s),
        tokens(RandomInts(int64_t{s.B} * s.T, 31, s.V)),
        wte(RandomFloats(int64_t{s.V} * s.C, 32)),
        wpe(RandomFloats(int64_t{s.T + s.extra_positions} * s.C, 33)),
        dout(RandomFloats(int64_t{s.B} * s.T * s.C, 34)) {}

  Vec Forward(const Vec& te, const Vec& pe) const {
    return reference::Embedding(tokens, te, pe, s.B, s.T, s.C);
  }

  Shape s;
  std::vector<int32_t> tokens;
  std::vector<float> wte, wpe, dout;
};

::testing::Message Trace(Shape s) {
  return ::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " V=" << s.V;
}

// V smaller than B*T, so tokens repeat.
const Shape kShapes[] = {{2, 3, 5, 4, 2}, {1, 1, 1, 1, 0}, {3, 7, 13, 5, 1}, {4, 64, 256, 50, 0}};

TEST_P(Ops, EmbeddingForwardMatchesReference) {
  for (Shape s : kShapes) {
    SCOPED_TRACE(Trace(s));
    const Inputs in(s);
    DeviceBuffer<int32_t> tokens = Upload(in.tokens);
    DeviceBuffer<float> wte = Upload(in.wte), wpe = Upload(in.wpe);
    DeviceBuffer<float> out = Garbage(int64_t{s.B} * s.T * s.C);
    ASSERT_TRUE(
        backend()
            ->EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C)
            .ok());
    EXPECT_TRUE(
        AllNear(Download(out), in.Forward(ToDouble(in.wte), ToDouble(in.wpe)), kForwardTol));
  }
}

TEST_P(Ops, EmbeddingBackwardMatchesFiniteDifferencesAndAccumulates) {
  for (Shape s : kShapes) {
    if (int64_t{s.V + s.T} * s.C > 5000) continue;  // finite differences of the small shapes
    SCOPED_TRACE(Trace(s));
    const Inputs in(s);
    const std::vector<float> dwte0 = RandomFloats(in.wte.size(), 35);
    const std::vector<float> dwpe0 = RandomFloats(in.wpe.size(), 36);
    DeviceBuffer<int32_t> tokens = Upload(in.tokens);
    DeviceBuffer<float> dout = Upload(in.dout), dwte = Upload(dwte0), dwpe = Upload(dwpe0);
    ASSERT_TRUE(
        backend()
            ->EmbeddingBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C)
            .ok());
    const Vec te = ToDouble(in.wte), pe = ToDouble(in.wpe), dy = ToDouble(in.dout);
    const Vec want_dwte =
        NumericalGradient([&](const Vec& v) { return in.Forward(v, pe); }, te, dy);
    const Vec want_dwpe =
        NumericalGradient([&](const Vec& v) { return in.Forward(te, v); }, pe, dy);
    EXPECT_TRUE(AllNear(Download(dwte), Plus(ToDouble(dwte0), want_dwte), kGradientTol));
    EXPECT_TRUE(AllNear(Download(dwpe), Plus(ToDouble(dwpe0), want_dwpe), kGradientTol));
  }
}

// At GPT-2's width, against the closed form: every (b,t) adds its dout row to dwte[token] and
// dwpe[t].
TEST_P(Ops, EmbeddingBackwardAtModelWidthSumsRepeatedTokens) {
  const Shape s = kShapes[3];
  const Inputs in(s);
  DeviceBuffer<int32_t> tokens = Upload(in.tokens);
  DeviceBuffer<float> dout = Upload(in.dout);
  DeviceBuffer<float> dwte = Filled(in.wte.size(), 0.0f), dwpe = Filled(in.wpe.size(), 0.0f);
  ASSERT_TRUE(
      backend()
          ->EmbeddingBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C)
          .ok());
  Vec want_dwte(in.wte.size(), 0.0), want_dwpe(in.wpe.size(), 0.0);
  for (int b = 0; b < s.B; ++b) {
    for (int t = 0; t < s.T; ++t) {
      const int64_t n = int64_t{b} * s.T + t;
      for (int c = 0; c < s.C; ++c) {
        want_dwte[int64_t{in.tokens[n]} * s.C + c] += in.dout[n * s.C + c];
        want_dwpe[int64_t{t} * s.C + c] += in.dout[n * s.C + c];
      }
    }
  }
  EXPECT_TRUE(AllNear(Download(dwte), want_dwte, kForwardTol));
  EXPECT_TRUE(AllNear(Download(dwpe), want_dwpe, kForwardTol));
}

// Token values live in device memory; the CPU backend checks them, a GPU backend cannot cheaply.
TEST_P(Ops, EmbeddingRejectsNegativeTokensOnCpu) {
  if (!IsCpu()) GTEST_SKIP() << "token values are only validated by the CPU backend";
  DeviceBuffer<int32_t> tokens = Upload(std::vector<int32_t>{0, -1});
  DeviceBuffer<float> f = Filled(64, 0.0f);
  absl::Status status =
      backend()->EmbeddingForward(f.data(), tokens.data(), f.data(), f.data(), 1, 2, 4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("tokens[0,1] = -1"), absl::string_view::npos) << status;
}

}  // namespace
}  // namespace dtrain::kernels::testing
