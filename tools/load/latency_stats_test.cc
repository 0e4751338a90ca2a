#include "tools/load/latency_stats.h"

#include <vector>

#include "gtest/gtest.h"

namespace dtrain::load {
namespace {

TEST(Percentile, NoSamplesIsZero) {
  std::vector<double> none;
  EXPECT_EQ(Percentile(none, 50), 0);
}

TEST(Percentile, OneSampleIsEveryPercentile) {
  std::vector<double> one = {3.0};
  EXPECT_EQ(Percentile(one, 0), 3.0);
  EXPECT_EQ(Percentile(one, 50), 3.0);
  EXPECT_EQ(Percentile(one, 100), 3.0);
}

TEST(Percentile, NearestRankOfOneToHundred) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile(v, 99.5), 100);
  EXPECT_EQ(Percentile(v, 100), 100);
  EXPECT_EQ(Percentile(v, 0), 1);
}

TEST(LatencyStats, SummarizesAndResets) {
  LatencyStats s;
  for (int i = 1; i <= 10; ++i) s.Add(i);
  Summary m = s.Summarize();
  EXPECT_EQ(m.count, 10);
  EXPECT_EQ(m.p50, 5);
  EXPECT_EQ(m.p90, 9);
  EXPECT_EQ(m.p99, 10);
  EXPECT_EQ(m.max, 10);
  EXPECT_DOUBLE_EQ(m.mean, 5.5);
  s.Reset();
  EXPECT_EQ(s.Summarize().count, 0);
}

}  // namespace
}  // namespace dtrain::load
