#include "worker/model/sampler.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace dtrain::model {
namespace {

TEST(Sampler, TemperatureZeroIsTheArgmaxLowestIdOnTies) {
  Sampler sampler({.temperature = 0.0});
  EXPECT_EQ(sampler.Pick(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f}), 1);
}

TEST(Sampler, TopKOfOneIsGreedyAtAnyTemperature) {
  Sampler sampler({.temperature = 5.0, .top_k = 1, .seed = 7});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler.Pick(std::vector<float>{0.1f, 0.3f, 0.2f}), 1);
}

TEST(Sampler, TopKDrawsOnlyAmongTheKLargest) {
  Sampler sampler({.temperature = 1.0, .top_k = 2, .seed = 3});
  std::map<int, int> counts;
  for (int i = 0; i < 2000; ++i) ++counts[sampler.Pick(std::vector<float>{0.0f, 1.0f, 0.0f, 1.0f})];
  EXPECT_EQ(counts.size(), 2u);
  // Two equal logits: each about half the draws (binomial sd ~22).
  EXPECT_NEAR(counts[1], 1000, 150);
  EXPECT_NEAR(counts[3], 1000, 150);
}

TEST(Sampler, TheSameSeedDrawsTheSameTokens) {
  const std::vector<float> logits = {0.1f, 0.4f, 0.3f, 0.2f, 0.5f};
  Sampler a({.temperature = 1.0, .seed = 42}), b({.temperature = 1.0, .seed = 42});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.Pick(logits), b.Pick(logits));
}

TEST(Sampler, ValidateNamesTheField) {
  EXPECT_EQ(Validate({.temperature = -1.0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Validate({.top_k = -2}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Validate({.temperature = 0.0, .top_k = 40}).ok());
}

}  // namespace
}  // namespace dtrain::model
