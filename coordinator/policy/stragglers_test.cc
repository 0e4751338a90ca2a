#include "coordinator/policy/stragglers.h"

#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// pp stages of one rank each (dp=1, tp=1) with these planned costs.
Placement Pipeline(std::vector<double> costs) {
  Placement p;
  for (int s = 0; s < static_cast<int>(costs.size()); ++s) {
    RankAssignment* r = p.add_ranks();
    r->set_pp_rank(s);
    r->set_worker_id("w" + std::to_string(s + 1));
    p.add_stage_costs(costs[s]);
  }
  return p;
}

StragglerSpec Spec(double threshold, int window) {
  StragglerSpec s;
  s.set_threshold(threshold);
  s.set_window_steps(window);
  s.set_policy("report");
  return s;
}

constexpr int64_t kWarm = StragglerScorer::kWarmupSteps;

// Step `step` after the run's warm-up steps (step kWarm + step of the run).
RankTiming Timing(int64_t step, double compute) {
  RankTiming t;
  t.set_step(kWarm + step);
  t.set_compute_s(compute);
  t.set_bubble_s(0.1);  // not compared: a victim's waits would blame it
  return t;
}

// A scorer whose run has been through its warm-up: steps 1..kWarm of every rank, 100x slow on
// rank 0, which no score may see.
StragglerScorer Warm(const StragglerSpec& spec, const Placement& p) {
  StragglerScorer s(spec, p);
  for (int64_t step = 1; step <= kWarm; ++step) {
    for (int r = 0; r < p.ranks_size(); ++r) {
      RankTiming t;
      t.set_step(step);
      t.set_compute_s(r == 0 ? 100 : 1);
      s.Add(r, t);
    }
  }
  return s;
}

// Every rank's steps [from, to] with compute = per_cost[r] * its stage cost.
void Steps(StragglerScorer& s, const Placement& p, int64_t from, int64_t to,
           std::vector<double> per_cost) {
  for (int64_t step = from; step <= to; ++step) {
    for (int r = 0; r < p.ranks_size(); ++r) {
      s.Add(r, Timing(step, per_cost[r] * p.stage_costs(p.ranks(r).pp_rank())));
    }
  }
}

TEST(RankCosts, StageCostOfEachRankElseOne) {
  Placement p = Pipeline({3.5, 2.0});
  RankAssignment* second_replica = p.add_ranks();
  second_replica->set_pp_rank(1);
  EXPECT_THAT(RankCosts(p), ElementsAre(3.5, 2.0, 2.0));
  p.clear_stage_costs();
  EXPECT_THAT(RankCosts(p), ElementsAre(1.0, 1.0, 1.0));
}

TEST(StragglerScorer, BalancedPipelineScoresOneAfterNormalisingByStageCost) {
  // Stage 0 carries the embedding (cost 3), stage 2 the head (cost 4): their compute is longer,
  // but per unit of cost every stage runs at 0.1 s.
  const Placement p = Pipeline({3, 2, 4});
  StragglerScorer s = Warm(Spec(1.5, 4), p);
  Steps(s, p, 1, 4, {0.1, 0.1, 0.1});
  std::optional<StragglerScorer::Result> r = s.Score();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->window_end_step, kWarm + 4);
  ASSERT_EQ(r->scores.size(), 3u);
  for (const StragglerScore& score : r->scores) {
    EXPECT_DOUBLE_EQ(score.score(), 1.0) << score.rank();
    EXPECT_FALSE(score.flagged());
  }
  EXPECT_DOUBLE_EQ(r->scores[2].compute_s(), 0.4);
  EXPECT_DOUBLE_EQ(r->scores[2].peer_compute_s(), 0.4);
  EXPECT_THAT(r->flagged, IsEmpty());
  EXPECT_FALSE(s.Score().has_value());  // the same window is scored once
}

TEST(StragglerScorer, NoScoreBeforeEveryRankReportedAFullWindow) {
  const Placement p = Pipeline({1, 1});
  StragglerScorer s = Warm(Spec(1.5, 4), p);
  Steps(s, p, 1, 3, {1, 1});
  s.Add(0, Timing(4, 1));  // rank 1 has not reported step 4 yet
  EXPECT_FALSE(s.Score().has_value());
  s.Add(1, Timing(4, 1));
  EXPECT_TRUE(s.Score().has_value());
}

TEST(StragglerScorer, OneRankNeverScores) {
  const Placement p = Pipeline({1});
  StragglerScorer s = Warm(Spec(1.5, 2), p);
  Steps(s, p, 1, 5, {1});
  EXPECT_FALSE(s.Score().has_value());
}

TEST(StragglerScorer, SlowRankIsItsComputeOverItsPeersMedian) {
  // Four stages; rank 2 computes 2.4x the others per unit of cost. Its peers' median is 0.1 per
  // unit; rank 2's own median of peers excludes it.
  const Placement p = Pipeline({2, 1, 1, 2});
  StragglerScorer s = Warm(Spec(1.5, 3), p);
  Steps(s, p, 1, 3, {0.1, 0.1, 0.24, 0.1});
  std::optional<StragglerScorer::Result> r = s.Score();
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR(r->scores[2].score(), 2.4, 1e-12);
  EXPECT_TRUE(r->scores[2].flagged());
  EXPECT_NEAR(r->scores[2].compute_s(), 0.24, 1e-12);
  EXPECT_NEAR(r->scores[2].peer_compute_s(), 0.1, 1e-12);
  EXPECT_NEAR(r->scores[0].score(), 1.0, 1e-12);  // median of 0.1, 0.24, 0.1
  EXPECT_THAT(r->flagged, ElementsAre(2));
  EXPECT_EQ(r->scores[2].worker_id(), "w3");
  EXPECT_EQ(r->scores[2].label(), "dp0 pp2 tp0");
  EXPECT_EQ(StragglerFlagged(r->scores[2], 3),
            "straggler: rank 2 (w3, dp0 pp2 tp0) is 2.4x the median of its peers over the last "
            "3 steps (compute 0.24 s/step vs 0.1 s)");
}

TEST(StragglerScorer, WindowMeanIgnoresOneSlowStep) {
  // One step 3x slow in a window of 10: the mean is 1.2x, under the threshold.
  const Placement p = Pipeline({1, 1});
  StragglerScorer s = Warm(Spec(1.5, 10), p);
  Steps(s, p, 1, 9, {1, 1});
  s.Add(0, Timing(10, 3));
  s.Add(1, Timing(10, 1));
  std::optional<StragglerScorer::Result> r = s.Score();
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR(r->scores[0].score(), 1.2, 1e-12);
  EXPECT_THAT(r->flagged, IsEmpty());
}

TEST(StragglerScorer, HysteresisClearsOnlyBelowTheMidpoint) {
  const Placement p = Pipeline({1, 1, 1});
  StragglerScorer s = Warm(Spec(1.5, 2), p);
  EXPECT_DOUBLE_EQ(s.clear_below(), 1.25);
  Steps(s, p, 1, 2, {1, 1, 1.6});
  std::optional<StragglerScorer::Result> r = s.Score();
  ASSERT_TRUE(r.has_value());
  EXPECT_THAT(r->flagged, ElementsAre(2));
  Steps(s, p, 3, 4, {1, 1, 1.3});  // under the threshold, above 1.25: still flagged
  r = s.Score();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->scores[2].flagged());
  EXPECT_THAT(r->flagged, IsEmpty());
  EXPECT_THAT(r->recovered, IsEmpty());
  Steps(s, p, 5, 6, {1, 1, 1.1});
  r = s.Score();
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->scores[2].flagged());
  EXPECT_THAT(r->recovered, ElementsAre(2));
  EXPECT_EQ(StragglerCleared(r->scores[2], 2),
            "straggler cleared: rank 2 (w3, dp0 pp2 tp0) is back to 1.1x the median of its "
            "peers over the last 2 steps");
}

TEST(StragglerScorer, IgnoresUnknownRanksAndOldSteps) {
  const Placement p = Pipeline({1, 1});
  StragglerScorer s = Warm(Spec(1.5, 2), p);
  s.Add(-1, Timing(1, 5));
  s.Add(2, Timing(1, 5));
  Steps(s, p, 1, 2, {1, 1});
  ASSERT_TRUE(s.Score().has_value());
  s.Add(0, Timing(2, 100));  // already scored
  Steps(s, p, 3, 3, {1, 1});
  std::optional<StragglerScorer::Result> r = s.Score();
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->scores[0].score(), 1.0);
}

}  // namespace
}  // namespace dtrain::coordinator
