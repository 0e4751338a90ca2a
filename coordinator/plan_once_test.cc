// The coordinator plans a job once per placement and sends each rank its part of the plan
// (JobAssignment.rank_plan); heartbeats, deliveries and scheduler passes plan nothing.
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/job_manager_harness.h"
#include "gtest/gtest.h"
#include "plan/job_plan.h"

namespace dtrain::coordinator {
namespace {

// pp=2 over 4 layers, zb-h1, two micro-batches, checkpoints (so a recovery resumes).
constexpr const char* kPp2Spec = R"({
  "dataset": "/d", "steps": 100, "batch_size": 4, "micro_batch_size": 2,
  "checkpoint": {"dir": "/c", "interval_steps": 10}, "parallel": {"pp": 2, "schedule": "zb-h1"},
  "model": {"vocab_size": 256, "context": 32, "n_layer": 4, "n_head": 2, "n_embd": 32}})";

void ExpectRankPlan(const JobAssignment& a, int rank) {
  SCOPED_TRACE(absl::StrCat("rank ", rank));
  EXPECT_FALSE(a.has_job_plan()) << "the whole plan stays on the coordinator";
  ASSERT_TRUE(a.has_rank_plan());
  const RankPlan& r = a.rank_plan();
  EXPECT_EQ(r.rank(), rank);
  EXPECT_EQ(r.schedule(), SCHEDULE_ZB_H1);
  EXPECT_EQ(r.device(), DEVICE_AUTO);
  EXPECT_EQ(r.micro_batches(), 2);
  EXPECT_EQ(r.micro_batch_size(), 2);
  EXPECT_EQ(r.layout().pp(), 2);
  ASSERT_EQ(r.chunks_size(), 1);
  EXPECT_EQ(r.chunks(0).first_layer(), a.rank().first_layer());
  EXPECT_EQ(r.chunks(0).num_layers(), a.rank().num_layers());
  EXPECT_GT(r.memory().total(), 0);
}

TEST(PlanOnce, APlacementPlansOnceAndEachRankIsSentItsPart) {
  Harness h(TempDb("plan-once"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Register("w2", "s-w2").ok());
  ASSERT_TRUE(h.Submit(kPp2Spec).ok());  // SubmitJob's own check of the spec
  const int64_t before = plan::PlansMadeForTesting();
  for (int pass = 0; pass < 3; ++pass) h.m().RunSchedulerPass();
  ASSERT_EQ(h.Get("job-000001").state(), PLACING);
  EXPECT_EQ(plan::PlansMadeForTesting() - before, 1);
  const HeartbeatResponse w1 = h.Beat("w1", "s-w1");
  const HeartbeatResponse w2 = h.Beat("w2", "s-w2");
  ExpectRankPlan(w1.assignment(), 0);
  ExpectRankPlan(w2.assignment(), 1);
  h.Beat("w1", "s-w1", "job-000001");
  h.Beat("w2", "s-w2", "job-000001");
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  EXPECT_EQ(plan::PlansMadeForTesting() - before, 1) << "deliveries and passes plan nothing";
}

TEST(PlanOnce, ARecoverysPlacementPlansAtMostOnce) {
  Harness h(TempDb("plan-once-recovery"));
  h.RunOn(2, kPp2Spec);
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());  // the spare
  ASSERT_TRUE(h.Step("w2", "s-w2", "job-000001", 1, 5.0).ok());
  const int64_t before = plan::PlansMadeForTesting();
  // w2 is killed: w1 blames it, the failure window passes, the job is placed again on w1, w3.
  ASSERT_TRUE(h.Failure("w1", "job-000001", FAILURE_PEER, "stream to rank 1 broke", {"w2"}).ok());
  h.Advance(absl::Seconds(3));
  h.Beat("w1", "s-w1");
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  ASSERT_EQ(job.recoveries_size(), 1);
  ASSERT_EQ(job.state(), PLACING);
  // The same layout as the first run: its plan is reused (0); a new layout is planned once.
  EXPECT_LE(plan::PlansMadeForTesting() - before, 1);
  const HeartbeatResponse w3 = h.Beat("w3", "s-w3");
  ASSERT_TRUE(w3.has_assignment());
  EXPECT_EQ(w3.assignment().attempt(), 1);
  ExpectRankPlan(w3.assignment(), 1);
}

TEST(PlanOnce, ARestartedCoordinatorResendsTheRankPlan) {
  const std::string db = TempDb("plan-once-restart");
  Harness h(db);
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Register("w2", "s-w2").ok());
  ASSERT_TRUE(h.Submit(kPp2Spec).ok());
  h.m().RunSchedulerPass();
  ASSERT_EQ(h.Get("job-000001").state(), PLACING);
  const int64_t before = plan::PlansMadeForTesting();
  h.Open();  // restart before the workers heard of the job: the placement is reloaded
  EXPECT_EQ(plan::PlansMadeForTesting() - before, 1) << "one plan for the reloaded placement";
  ASSERT_TRUE(h.Register("w2", "s-w2").ok());
  const HeartbeatResponse w2 = h.Beat("w2", "s-w2");
  ASSERT_TRUE(w2.has_assignment());
  ExpectRankPlan(w2.assignment(), 1);
}

}  // namespace
}  // namespace dtrain::coordinator
