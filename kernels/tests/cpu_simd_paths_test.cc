// The CPU kernels that run an AVX-512 variant where the CPU has one (kernels/cpu/avx512.h): both
// variants against the double reference and finite differences, and against each other. On a
// CPU without AVX-512 both runs take the AVX2 path, which the comparison then trivially passes.
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/gelu.h"
#include "kernels/tests/ops_test_util.h"
#include "kernels/tests/reference.h"

namespace dtrain::kernels::testing {
namespace {

using cpu::TestOnlyDisableAvx512;

// Restores the dispatch when a test ends, whatever it set.
class CpuSimdPaths : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { TestOnlyDisableAvx512(/*disable=*/!GetParam()); }
  void TearDown() override { TestOnlyDisableAvx512(false); }
};

// n not a multiple of any vector width nor of the threads' 64-element parts.
std::vector<float> Inputs(uint32_t seed) { return RandomFloats((1 << 16) + 5, seed, 4.0f); }

TEST_P(CpuSimdPaths, GeluForwardMatchesReference) {
  const std::vector<float> x = Inputs(1);
  for (int threads : {1, 3}) {
    std::vector<float> out(x.size(), -1.0f);
    ASSERT_TRUE(cpu::GeluForward(out.data(), x.data(), x.size(), threads).ok());
    EXPECT_TRUE(AllNear(out, reference::Gelu(ToDouble(x)), kForwardTol)) << threads;
  }
}

TEST_P(CpuSimdPaths, GeluBackwardMatchesFiniteDifferences) {
  const std::vector<float> x = Inputs(2), dy = RandomFloats(x.size(), 3);
  std::vector<float> dinp(x.size(), -1.0f);
  ASSERT_TRUE(cpu::GeluBackward(dinp.data(), x.data(), dy.data(), x.size(), 3).ok());
  const Vec want = reference::GeluBackwardByDifferences(ToDouble(x), ToDouble(dy));
  EXPECT_TRUE(AllNear(dinp, want, kGradientTol));
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuSimdPaths, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "avx512_where_available" : "avx2";
                         });

// The two paths differ by rounding only: a few ulp of tanh, which the backward's cancellation
// (1 + tanh and 1 - tanh^2 near tanh = -1, times up to ~5 at |x| ~ 4) makes ~10x larger.
TEST(CpuSimdPathsAgree, GeluForwardAndBackward) {
  if (!cpu::CpuHasAvx512()) GTEST_SKIP() << "this CPU has no AVX-512: one path only";
  const std::vector<float> x = Inputs(4), dy = RandomFloats(x.size(), 5);
  std::vector<float> f[2], b[2];
  for (int avx512 = 0; avx512 < 2; ++avx512) {
    TestOnlyDisableAvx512(avx512 == 0);
    f[avx512].resize(x.size());
    b[avx512].resize(x.size());
    ASSERT_TRUE(cpu::GeluForward(f[avx512].data(), x.data(), x.size(), 2).ok());
    ASSERT_TRUE(cpu::GeluBackward(b[avx512].data(), x.data(), dy.data(), x.size(), 2).ok());
  }
  TestOnlyDisableAvx512(false);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(f[0][i], f[1][i], 4e-7f * (1.0f + std::fabs(f[0][i]))) << "x=" << x[i];
    ASSERT_NEAR(b[0][i], b[1][i], 4e-6f * (1.0f + std::fabs(b[0][i]))) << "x=" << x[i];
  }
}

}  // namespace
}  // namespace dtrain::kernels::testing
