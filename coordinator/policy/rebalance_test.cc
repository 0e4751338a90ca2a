// The straggler policy "rebalance"'s decision (rebalance.h), with closed-form cases.
#include "coordinator/policy/rebalance.h"

#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/job_plan.h"
#include "plan/spec_json.h"

namespace dtrain::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A pp-stage job of `n_layer` layers whose embedding and head cost nearly nothing (width 512,
// vocabulary 16, 8 tokens: head 2*C*V/(24C^2+4TC) = 0.003 blocks), so cuts are in whole layers.
JobPlan Plan(int n_layer, int pp, const std::string& extra = "") {
  absl::StatusOr<JobPlan> plan = plan::ParseJobPlanJson(absl::StrCat(
      R"({"model": {"vocab_size": 16, "context": 8, "n_layer": )", n_layer,
      R"(, "n_head": 4, "n_embd": 512}, "dataset": "/d", "steps": 10, "batch_size": 4, )",
      R"("checkpoint": {"dir": "/c"}, "parallel": {"pp": )", pp, extra, "}}"));
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : JobPlan();
}

TEST(DecideRebalance, ATwiceSlowerMiddleStageGetsHalfTheLayersOfTheOthers) {
  // 10 layers on 4, 3, 3; stage 1 takes 2x per layer: times 4, 6, 3.
  const JobPlan plan = Plan(10, 3, R"(, "stage_layers": [4, 3, 3])");
  const double per_layer = 0.1;
  absl::StatusOr<RebalanceDecision> d =
      DecideRebalance(plan, {4 * per_layer * 1.001, 6 * per_layer, 3 * per_layer});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->from, ElementsAre(4, 3, 3));
  EXPECT_THAT(d->to, ElementsAre(4, 2, 4));  // every stage 0.4 s
  EXPECT_TRUE(d->move);
  EXPECT_EQ(d->slowest_stage, 1);
  EXPECT_NEAR(d->slowdown, 2.0, 0.01);
  EXPECT_NEAR(d->measured_s, 0.6, 1e-9);
  EXPECT_NEAR(d->predicted_s, 0.4, 0.01);
  EXPECT_THAT(d->summary, HasSubstr("stage 1 measured 2.0x slower per layer: cut 4,3,3 -> 4,2,4"));
  // With the stages' workers named.
  d = DecideRebalance(plan, {0.4, 0.6, 0.3}, {"w1", "w2", "w3"});
  ASSERT_TRUE(d.ok());
  EXPECT_THAT(d->summary, HasSubstr("stage 1 (w2) measured 2.0x slower per layer"));
}

TEST(StageWorkers, NamesEachStagesWorkersOnce) {
  Placement placement;
  for (auto [pp, tp, worker] : {std::tuple{0, 0, "w1"}, {0, 1, "w2"}, {1, 0, "w3"}, {1, 1, "w3"}}) {
    RankAssignment* r = placement.add_ranks();
    r->set_pp_rank(pp);
    r->set_tp_rank(tp);
    r->set_worker_id(worker);
  }
  EXPECT_THAT(StageWorkers(placement, 2), ElementsAre("w1,w2", "w3"));
}

TEST(StageComputeSeconds, TheSlowestRankOfEachStage) {
  Placement placement;
  for (int pp : {0, 0, 1, 1}) placement.add_ranks()->set_pp_rank(pp);
  std::vector<StragglerScore> scores(4);
  const double compute[] = {0.2, 0.3, 0.5, 0.4};
  for (int r = 0; r < 4; ++r) {
    scores[r].set_rank(r);
    scores[r].set_compute_s(compute[r]);
  }
  EXPECT_THAT(StageComputeSeconds(placement, 2, scores), ElementsAre(0.3, 0.5));
  EXPECT_THAT(StageComputeSeconds(placement, 2, {}), ElementsAre(0, 0));
}

TEST(KeepCut, TheRebalancedCutThenTheRunsWhileTheStagesStay) {
  JobSpec submitted;
  submitted.mutable_parallel()->set_pp(3);
  JobSpec run = submitted;
  for (int l : {3, 1, 2}) run.mutable_parallel()->add_stage_layers(l);
  Recovery failure, rebalance;
  for (int l : {2, 1, 3}) rebalance.add_rebalance_to(l);
  EXPECT_THAT(KeepCut(rebalance, run, submitted).parallel().stage_layers(), ElementsAre(2, 1, 3));
  EXPECT_THAT(KeepCut(failure, run, submitted).parallel().stage_layers(), ElementsAre(3, 1, 2));
  JobSpec two_stages = submitted;
  two_stages.mutable_parallel()->set_pp(2);  // shrunk: the plan cuts the new stages
  EXPECT_TRUE(KeepCut(failure, run, two_stages).parallel().stage_layers().empty());
}

TEST(DecideRebalance, EqualStagesStayWhereTheyAre) {
  const JobPlan plan = Plan(6, 3);
  absl::StatusOr<RebalanceDecision> d = DecideRebalance(plan, {0.2, 0.2, 0.2});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->move);
  EXPECT_THAT(d->to, ElementsAre(2, 2, 2));
  EXPECT_THAT(d->summary, HasSubstr("the best cut 2,2,2 is the current one"));
}

TEST(DecideRebalance, AGainUnderTheMarginIsNotWorthARestart) {
  // 2, 2, 2 with stage 1 1.3x slower: the best cut 3,1,2 or 2,1,3 makes a fast stage take 3
  // layers (0.3 s) against the measured 0.26 s: worse. With 1.6x: 0.32 measured, best 0.3,
  // 6% better: under the 10% margin.
  const JobPlan plan = Plan(6, 3);
  absl::StatusOr<RebalanceDecision> d = DecideRebalance(plan, {0.2, 0.32, 0.2}, {}, 0.1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->move);
  EXPECT_NEAR(d->predicted_s, 0.3, 0.01);
  EXPECT_THAT(d->summary, HasSubstr("not 10% better than the measured 0.32 s"));
  // 2x slower: 0.4 measured, 0.3 predicted: 25% better, moved.
  d = DecideRebalance(plan, {0.2, 0.4, 0.2});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->move);
  EXPECT_EQ(d->to[1], 1);  // 3,1,2 or 2,1,3 (the head's cost tips it to the last stage)
  EXPECT_EQ(d->to[0] + d->to[2], 5);
}

TEST(DecideRebalance, ReadsTheCurrentCutFromThePlan) {
  // Running on 3,1,2 after a first re-cut: the stages now measure alike per layer, so the cut
  // the plan gives (2,2,2) is not proposed back.
  const JobPlan plan = Plan(6, 3, R"(, "stage_layers": [3, 1, 2])");
  absl::StatusOr<RebalanceDecision> d = DecideRebalance(plan, {0.3, 0.2, 0.2});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->from, ElementsAre(3, 1, 2));
  EXPECT_FALSE(d->move);
}

TEST(DecideRebalance, BadInputIsRefused) {
  const JobPlan plan = Plan(6, 3);
  EXPECT_EQ(DecideRebalance(plan, {0.2, 0.2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecideRebalance(plan, {0.2, 0, 0.2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecideRebalance(Plan(6, 1), {0.2}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dtrain::coordinator
