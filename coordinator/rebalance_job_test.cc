// JobManager::RebalanceJob (job_manager_rebalance.cc): a running pp=3 job whose middle stage is
// measured slow is re-cut and restarted on the new cut at its next sealed checkpoint, as a
// planned restart (not a failure), and later recoveries keep the cut.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_manager_harness.h"
#include "coordinator/recovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// pp=3, 6 layers of width 512 (the head costs ~nothing: the plan's cut is 2,2,2), a checkpoint
// every 10 of 100 steps.
constexpr char kPp3Spec[] = R"({"parallel": {"pp": 3}, "dataset": "/d", "steps": 100,
    "batch_size": 3, "checkpoint": {"dir": "/c", "interval_steps": 10},
    "fault_tolerance": {"max_restarts": 0},
    "model": {"vocab_size": 16, "context": 8, "n_layer": 6, "n_head": 4, "n_embd": 512}})";
constexpr char kJob[] = "job-000001";

std::string Events(Harness& h) {
  std::vector<std::string> texts;
  const absl::StatusOr<std::vector<JobEvent>> events = h.m().store().EventsFor(kJob);
  for (const JobEvent& e : *events) texts.push_back(e.text);
  return absl::StrJoin(texts, "\n");
}

absl::Status Sealed(Harness& h, int64_t step) {
  ReportProgressRequest sealed;
  sealed.set_worker_id("w1");
  sealed.set_session_id("s-w1");
  sealed.set_job_id(kJob);
  sealed.mutable_checkpoint()->set_step(step);
  sealed.mutable_checkpoint()->set_path(absl::StrFormat("/c/%s/step_%08d", kJob, step));
  return h.m().ReportProgress(sealed).status();
}

// The layers of each stage in a placement (pp order).
std::vector<int> PlacedCut(const Job& job) {
  std::vector<int> cut(3, 0);
  for (const RankAssignment& r : job.placement().ranks()) cut[r.pp_rank()] = r.num_layers();
  return cut;
}

TEST(RebalanceJob, ASlowMiddleStageLosesLayersAtTheNextSealedCheckpoint) {
  Harness h(TempDb("rebalance-job"));
  h.RunOn(3, kPp3Spec);
  ASSERT_THAT(PlacedCut(h.Get(kJob)), ElementsAre(2, 2, 2));
  ASSERT_TRUE(h.Step("w3", "s-w3", kJob, 5, 4.0).ok());

  // Stage 1 (w2) computes 2x longer per layer: 3,1,2 or 2,1,3 predicts 0.3 s against 0.4 s.
  absl::StatusOr<RebalanceDecision> d = h.m().RebalanceJob(kJob, {0.2, 0.4, 0.2}, "test");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(d->move);
  EXPECT_EQ(d->to[1], 1);
  EXPECT_THAT(Events(h), HasSubstr("rebalance (test): stage 1 (w2) measured 2.0x slower per "
                                   "layer: cut 2,2,2 -> "));
  EXPECT_THAT(Events(h), HasSubstr("; restarting on the new cut at the checkpoint its ranks are "
                                   "asked for now"));
  // Asked at once, not left to reach step 10 by the interval.
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Beat("w1", "s-w1", kJob).checkpoint_requests_size(), 1);
  EXPECT_EQ(h.Get(kJob).state(), RUNNING);  // until the checkpoint
  // A second request while one is pending is refused.
  EXPECT_EQ(h.m().RebalanceJob(kJob, {0.2, 0.4, 0.2}, "test").status().code(),
            absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(Sealed(h, 10).ok());
  Job job = h.Get(kJob);
  ASSERT_EQ(job.state(), RECOVERING);  // planned: max_restarts 0 does not fail it
  ASSERT_EQ(job.recoveries_size(), 1);
  EXPECT_THAT(job.recoveries(0).rebalance_to(), ElementsAre(d->to[0], 1, d->to[2]));
  EXPECT_THAT(job.reason(), HasSubstr("rebalance: stage 1 (w2) measured 2.0x slower per layer"));
  EXPECT_THAT(job.reason(), HasSubstr("at step 10"));
  const std::vector<Recovery> recoveries(job.recoveries().begin(), job.recoveries().end());
  EXPECT_EQ(FailureCount(recoveries), 0);

  for (const char* w : {"w1", "w2", "w3"}) h.Beat(w, absl::StrCat("s-", w));  // runs stopped
  h.m().RunSchedulerPass();
  job = h.Get(kJob);
  ASSERT_EQ(job.state(), PLACING);
  EXPECT_THAT(PlacedCut(job), ElementsAre(d->to[0], 1, d->to[2]));
  EXPECT_THAT(job.recoveries(0).layout().stage_layers(), ElementsAre(d->to[0], 1, d->to[2]));
  for (const char* w : {"w1", "w2", "w3"}) {
    HeartbeatResponse hb = h.Beat(w, absl::StrCat("s-", w));
    ASSERT_TRUE(hb.has_assignment()) << w;
    // Each rank is sent its own layers of the new cut (rank_assignment.h: not the whole cut).
    const int cut[] = {d->to[0], 1, d->to[2]};
    const RankAssignment& me = hb.assignment().rank();
    EXPECT_EQ(me.num_layers(), cut[me.pp_rank()]) << w;
    h.Beat(w, absl::StrCat("s-", w), kJob);
  }
  ASSERT_EQ(h.Get(kJob).state(), RUNNING);
  // Until the new run trains a step, its recovery is open: no rebalance yet.
  EXPECT_THAT(h.m().RebalanceJob(kJob, {0.2, 0.4, 0.2}, "test").status().message(),
              HasSubstr("still in recovery 1"));
  ASSERT_TRUE(h.Step("w3", "s-w3", kJob, 11, 4.0).ok());

  // A coordinator restart keeps the cut of the current run.
  h.Open();
  for (const char* w : {"w1", "w2", "w3"}) {
    ASSERT_TRUE(h.Register(w, absl::StrCat("s-", w), kJob).ok());
  }
  h.m().RunSchedulerPass();
  // Measured alike per layer on the new cut: nothing better to move to.
  d = h.m().RebalanceJob(kJob, {0.2 * d->to[0], 0.4, 0.2 * d->to[2]}, "again");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->move);
  EXPECT_THAT(Events(h), HasSubstr("rebalance (again): not re-cut: "));
}

// interval_steps 0: the ranks seal the checkpoint they are asked for, so the re-cut costs no
// step either. And a checkpoint every rank skips (a full disk) drops the re-cut rather than
// train steps again for a speed-up.
TEST(RebalanceJob, WithoutPeriodicCheckpointsItWaitsForTheOneItAsksFor) {
  Harness h(TempDb("rebalance-interval-0"));
  std::string spec = kPp3Spec;
  spec.replace(spec.find(R"(, "interval_steps": 10)"),
               std::string(R"(, "interval_steps": 10)").size(), R"(, "interval_steps": 0)");
  h.RunOn(3, spec);
  ASSERT_TRUE(h.Step("w3", "s-w3", kJob, 7, 4.0).ok());
  absl::StatusOr<RebalanceDecision> d = h.m().RebalanceJob(kJob, {0.2, 0.4, 0.2}, "test");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(d->move);
  EXPECT_EQ(h.Get(kJob).state(), RUNNING);
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Beat("w2", "s-w2", kJob).checkpoint_requests_size(), 1);

  ASSERT_TRUE(h.Skipped(kJob, 8, "rank 0: no space left on /c").ok());
  EXPECT_EQ(h.Get(kJob).state(), RUNNING);
  EXPECT_THAT(Events(h), HasSubstr("rebalance dropped: the checkpoint of step 8 was skipped (rank "
                                   "0: no space left on /c); a later straggler window or `dtrain "
                                   "rebalance` decides again"));
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Beat("w2", "s-w2", kJob).checkpoint_requests_size(), 0);

  // Asked again, it seals: the new cut begins there.
  ASSERT_TRUE(h.m().RebalanceJob(kJob, {0.2, 0.4, 0.2}, "test").ok());
  ASSERT_TRUE(Sealed(h, 9).ok());
  const Job job = h.Get(kJob);
  ASSERT_EQ(job.state(), RECOVERING);
  EXPECT_THAT(job.reason(), HasSubstr("at step 9"));
}

TEST(RebalanceJob, OnlyARunningJobIsRebalanced) {
  Harness h(TempDb("rebalance-queued"));
  ASSERT_TRUE(h.Submit(kPp3Spec).ok());
  EXPECT_EQ(h.m().RebalanceJob(kJob, {0.2, 0.4, 0.2}, "test").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(h.m().RebalanceJob("job-000009", {0.2, 0.4, 0.2}, "test").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dtrain::coordinator
