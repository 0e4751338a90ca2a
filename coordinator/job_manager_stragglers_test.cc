// The job manager's straggler handling (job_manager_stragglers.cc) with a fake clock: timings in
// heartbeats -> scores in GetJob and an event; the policies report and replace.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_manager_harness.h"
#include "coordinator/recovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// pp=2 with checkpoints, scored over windows of 4 steps at threshold 1.5 with `policy`.
std::string Spec(const std::string& policy) {
  return absl::StrCat(
      R"({"parallel": {"pp": 2}, "checkpoint": {"dir": "/c", "interval_steps": 10}, )",
      R"("dataset": "/d", "steps": 100, "batch_size": 4, "fault_tolerance": {"max_restarts": 0},)",
      R"( "stragglers": {"threshold": 1.5, "window_steps": 4, "policy": ")", policy, R"("}, )",
      R"("model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 2, "n_embd": 32}})");
}

std::string Events(Harness& h) {
  std::vector<std::string> texts;
  const absl::StatusOr<std::vector<JobEvent>> events = h.m().store().EventsFor("job-000001");
  for (const JobEvent& e : *events) texts.push_back(e.text);
  return absl::StrJoin(texts, "\n");
}

constexpr int64_t kWarm = StragglerScorer::kWarmupSteps;

// A heartbeat of `worker` running job-000001 with steps [from, to] after the run's warm-up
// (kWarm + from...), each `compute` seconds per unit of its stage's planned cost.
void Timings(Harness& h, const std::string& worker, int64_t from, int64_t to, double compute) {
  const Job job = h.Get("job-000001");
  int stage = 0;
  for (const RankAssignment& r : job.placement().ranks()) {
    if (r.worker_id() == worker) stage = r.pp_rank();
  }
  HeartbeatRequest r;
  r.set_worker_id(worker);
  r.set_session_id("s-" + worker);
  r.set_running_job_id("job-000001");
  r.set_running_step(to);
  for (int64_t step = from; step <= to; ++step) {
    RankTiming* t = r.add_timings();
    t->set_step(kWarm + step);
    t->set_compute_s(compute * job.placement().stage_costs(stage));
    t->set_bubble_s(0.5);
  }
  ASSERT_TRUE(h.m().Heartbeat(r).ok());
}

// Steps [from, to] of both ranks (w1's and w2's compute per unit of cost), then a pass; the
// first call also sends the run's warm-up steps, w2 10x slow in them (not scored).
void Steps(Harness& h, int64_t from, int64_t to, double w1, double w2) {
  if (from == 1) {
    Timings(h, "w1", 1 - kWarm, 0, 0.1);
    Timings(h, "w2", 1 - kWarm, 0, 1.0);
  }
  Timings(h, "w1", from, to, w1);
  Timings(h, "w2", from, to, w2);
  h.m().RunSchedulerPass();
}

TEST(JobStragglers, HealthyRanksScoreOneAndNothingIsFlagged) {
  Harness h(TempDb("stragglers-healthy"));
  h.RunOn(2, Spec("report"));
  Steps(h, 1, 3, 0.1, 0.1);
  EXPECT_THAT(h.Get("job-000001").stragglers(), IsEmpty());  // no full window yet
  Steps(h, 4, 4, 0.1, 0.1);
  const Job job = h.Get("job-000001");
  ASSERT_EQ(job.stragglers_size(), 2);
  for (const StragglerScore& s : job.stragglers()) {
    EXPECT_DOUBLE_EQ(s.score(), 1.0);
    EXPECT_FALSE(s.flagged());
    EXPECT_EQ(s.window_end_step(), kWarm + 4);
  }
  EXPECT_EQ(job.stragglers(1).worker_id(), "w2");
  EXPECT_THAT(Events(h), Not(HasSubstr("straggler")));
}

TEST(JobStragglers, ReportFlagsTheSlowRankOnceAndClearsIt) {
  Harness h(TempDb("stragglers-report"));
  h.RunOn(2, Spec("report"));
  Steps(h, 1, 4, 0.1, 0.25);
  Job job = h.Get("job-000001");
  ASSERT_EQ(job.stragglers_size(), 2);
  EXPECT_TRUE(job.stragglers(1).flagged());
  EXPECT_NEAR(job.stragglers(1).score(), 2.5, 1e-9);
  EXPECT_THAT(Events(h), HasSubstr("straggler: rank 1 (w2, dp0 pp1 tp0) is 2.5x the median of "
                                   "its peers over the last 4 steps"));
  EXPECT_EQ(job.state(), RUNNING);
  EXPECT_THAT(job.recoveries(), IsEmpty());
  Steps(h, 5, 8, 0.1, 0.25);  // still slow: no second event
  Steps(h, 9, 12, 0.1, 0.1);  // recovered
  const std::string events = Events(h);
  EXPECT_EQ(events.find("straggler: rank 1"), events.rfind("straggler: rank 1")) << events;
  EXPECT_THAT(events, HasSubstr("straggler cleared: rank 1 (w2, dp0 pp1 tp0) is back to 1.0x"));
  EXPECT_FALSE(h.Get("job-000001").stragglers(1).flagged());
}

TEST(JobStragglers, ReplaceWithoutASpareReportsOnly) {
  Harness h(TempDb("stragglers-no-spare"));
  h.RunOn(2, Spec("replace"));
  Steps(h, 1, 4, 0.1, 0.3);
  EXPECT_THAT(Events(h),
              HasSubstr("straggler policy replace: no idle spare to replace w2 with; reporting "
                        "only"));
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
}

TEST(JobStragglers, ReplaceSwapsTheSlowWorkerForASpareWithoutCountingAFailure) {
  Harness h(TempDb("stragglers-replace"));
  h.RunOn(2, Spec("replace"));
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());
  Steps(h, 1, 4, 0.1, 0.3);
  Job job = h.Get("job-000001");
  ASSERT_EQ(job.state(), RECOVERING) << job.reason();
  ASSERT_EQ(job.recoveries_size(), 1);
  EXPECT_EQ(job.recoveries(0).replaced_worker(), "w2");
  EXPECT_THAT(job.reason(), HasSubstr("replacing straggler w2 (rank 1, dp0 pp1 tp0): 3.0x"));
  EXPECT_THAT(Events(h), HasSubstr("straggler policy replace: swapping w2 (rank 1, dp0 pp1 tp0) "
                                   "for the idle spare w3"));
  // max_restarts 0, yet the job is placed again: a planned restart, not a failure.
  const std::vector<Recovery> recoveries(job.recoveries().begin(), job.recoveries().end());
  EXPECT_EQ(FailureCount(recoveries), 0);
  h.Beat("w1", "s-w1");  // both old ranks stopped
  h.Beat("w2", "s-w2");
  h.m().RunSchedulerPass();
  job = h.Get("job-000001");
  ASSERT_EQ(job.state(), PLACING) << job.reason();
  std::vector<std::string> workers;
  for (const RankAssignment& r : job.placement().ranks()) workers.push_back(r.worker_id());
  EXPECT_THAT(workers, ElementsAre("w1", "w3"));  // never the straggler
  EXPECT_THAT(job.stragglers(), IsEmpty());       // a new run: a new window
}

// Swapped out once, the slow worker is idle again, but not this job's spare: a healthy rank's
// noisy window (here w1 at 2x) would otherwise swap it back in, to be flagged again.
TEST(JobStragglers, AReplacedStragglerIsNotTheSpareAgain) {
  Harness h(TempDb("stragglers-not-again"));
  h.RunOn(2, Spec("replace"));
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());
  Steps(h, 1, 4, 0.1, 0.3);
  h.Beat("w1", "s-w1");
  h.Beat("w2", "s-w2");
  h.m().RunSchedulerPass();
  ASSERT_EQ(h.Get("job-000001").state(), PLACING);
  ASSERT_TRUE(h.Beat("w1", "s-w1").has_assignment());  // the new run's ranks, then their acks
  ASSERT_TRUE(h.Beat("w3", "s-w3").has_assignment());
  h.Beat("w1", "s-w1", "job-000001");
  h.Beat("w3", "s-w3", "job-000001");
  h.m().RunSchedulerPass();
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  Timings(h, "w1", 1 - kWarm, 4, 0.2);
  Timings(h, "w3", 1 - kWarm, 4, 0.1);
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), RUNNING) << job.reason();
  EXPECT_EQ(job.recoveries_size(), 1);
  EXPECT_THAT(Events(h), HasSubstr("straggler policy replace: no idle spare to replace w1 with; "
                                   "reporting only"));
}

}  // namespace
}  // namespace dtrain::coordinator
