// The job manager's recoveries (FaultTolerance): a job whose rank fails goes RECOVERING, is
// placed again and resumes; the rules of recovery.h.
#include "coordinator/recovery.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_manager_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

// pp=2 with checkpoints; `fault_tolerance` is the JSON object's body.
std::string Pp2Spec(const std::string& fault_tolerance, const std::string& parallel = "\"pp\": 2") {
  return absl::StrCat(
      R"({"parallel": {)", parallel, R"(}, "checkpoint": {"dir": "/c", "interval_steps": 10}, )",
      R"("dataset": "/d", "steps": 100, "batch_size": 4, "fault_tolerance": {)", fault_tolerance,
      R"(}, "model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 2, )",
      R"("n_embd": 32}})");
}

absl::StatusOr<ReportProgressResponse> Location(Harness& h, const std::string& worker,
                                                int64_t resumed_from_step) {
  ReportProgressRequest r;
  r.set_worker_id(worker);
  r.set_session_id("s-" + worker);
  r.set_job_id("job-000001");
  r.mutable_location()->set_dir("/c/job-000001");
  r.mutable_location()->set_resumed_from_step(resumed_from_step);
  r.mutable_location()->set_resumed_from(
      absl::StrCat("/c/job-000001/step_000000", resumed_from_step));
  return h.m().ReportProgress(r);
}

std::string Events(Harness& h) {
  std::vector<std::string> texts;
  const absl::StatusOr<std::vector<JobEvent>> events = h.m().store().EventsFor("job-000001");
  for (const JobEvent& e : *events) texts.push_back(e.text);
  return absl::StrJoin(texts, "\n");
}

// w2 (pp1) of a running pp=2 job is killed: w1 blames it, the failure window passes.
void KillW2(Harness& h) {
  ASSERT_TRUE(h.Failure("w1", "job-000001", FAILURE_PEER, "stream to rank 1 broke", {"w2"}).ok());
  h.Advance(absl::Seconds(3));
  h.Beat("w1", "s-w1");  // w1's runner ended; w2 is silent
  h.m().RunSchedulerPass();
}

TEST(Recovery, AKilledRankIsReplacedByASpareAndTheJobResumesFromItsCheckpoint) {
  Harness h(TempDb("recover-spare"));
  h.RunOn(2, Pp2Spec(""));
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());  // the spare
  for (int step = 1; step <= 13; ++step) {
    ASSERT_TRUE(h.Step("w2", "s-w2", "job-000001", step, 5.0).ok());
  }
  const std::string first_secret = h.Get("job-000001").placement().peer_secret();
  KillW2(h);
  Job job = h.Get("job-000001");
  ASSERT_EQ(job.recoveries_size(), 1);
  // The new run has its own peer secret: the old run's ranks cannot connect to it.
  EXPECT_EQ(first_secret.size(), 16u);
  EXPECT_EQ(job.placement().peer_secret().size(), 16u);
  EXPECT_NE(job.placement().peer_secret(), first_secret);
  const Recovery& r = job.recoveries(0);
  EXPECT_EQ(r.failed_worker(), "w2");
  EXPECT_EQ(r.last_step(), 13);
  EXPECT_THAT(r.cause(), HasSubstr("worker w2 (dp0 pp1 tp0) stopped answering"));
  EXPECT_THAT(States(job), ElementsAre(QUEUED, PLACING, RUNNING, RECOVERING, PLACING));
  EXPECT_EQ(job.state(), PLACING);  // at once: w1 stopped, w3 idle
  std::vector<std::string> workers;
  for (const RankAssignment& rank : job.placement().ranks()) workers.push_back(rank.worker_id());
  EXPECT_THAT(workers, ElementsAre("w1", "w3"));
  // Each new rank gets the job again as its run after recovery 1.
  HeartbeatResponse hb = h.Beat("w3", "s-w3");
  ASSERT_TRUE(hb.has_assignment());
  EXPECT_EQ(hb.assignment().attempt(), 1);
  EXPECT_EQ(hb.assignment().placement().peer_secret(), job.placement().peer_secret());
  EXPECT_EQ(h.Beat("w1", "s-w1").assignment().attempt(), 1);
  h.Beat("w1", "s-w1", "job-000001");
  h.Beat("w3", "s-w3", "job-000001");
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  // The old run's reporting rank is gone; the new one resumes from step 10 and redoes 11-13.
  ASSERT_TRUE(Location(h, "w1", 10).ok());
  ASSERT_TRUE(h.Step("w3", "s-w3", "job-000001", 11, 4.0).ok());
  job = h.Get("job-000001");
  EXPECT_TRUE(job.recoveries(0).done());
  EXPECT_EQ(job.recoveries(0).resumed_from_step(), 10);
  EXPECT_EQ(job.recoveries(0).steps_redone(), 3);
  EXPECT_EQ(job.recoveries(0).layout().pp(), 2);
  EXPECT_EQ(job.latest().step(), 11);
  const absl::StatusOr<std::vector<StepMetrics>> redone =
      h.m().store().MetricsAfter("job-000001", 10);
  ASSERT_EQ(redone->size(), 1u);        // the old run's 12 and 13 are gone until redone
  EXPECT_EQ((*redone)[0].loss(), 4.0);  // the redone step replaced the first
  EXPECT_THAT(Events(h), HasSubstr("recovery 1: resumed from step 10"));
  EXPECT_THAT(Events(h), HasSubstr("redoing steps 11-13"));
  EXPECT_THAT(Events(h), HasSubstr("recovery 1 done: training again at step 11; detect"));
}

// `dtrain checkpoint JOB` asked before a rank was lost: the new run's workers are asked too
// (the restart forgets a rebalance not begun, not a checkpoint someone is waiting for).
TEST(Recovery, ACheckpointAskedForIsAskedOfTheNewRun) {
  Harness h(TempDb("recover-asked"));
  h.RunOn(2, Pp2Spec(""));
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());  // the spare
  ASSERT_TRUE(h.Step("w2", "s-w2", "job-000001", 3, 5.0).ok());
  ASSERT_TRUE(h.m().CheckpointJob("job-000001", "").ok());
  KillW2(h);
  h.Beat("w1", "s-w1");
  h.Beat("w3", "s-w3");
  h.Beat("w1", "s-w1", "job-000001");
  h.Beat("w3", "s-w3", "job-000001");
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  h.m().RunSchedulerPass();
  const HeartbeatResponse beat = h.Beat("w3", "s-w3", "job-000001");
  ASSERT_EQ(beat.checkpoint_requests_size(), 1);
  EXPECT_EQ(beat.checkpoint_requests(0).after_step(), 0);
}

TEST(Recovery, FailuresBeyondMaxRestartsFailTheJobNamingEveryFailure) {
  Harness h(TempDb("recover-twice"));
  h.RunOn(2, Pp2Spec(R"("max_restarts": 1)"));
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());
  KillW2(h);
  ASSERT_EQ(h.Get("job-000001").state(), PLACING);
  h.Beat("w1", "s-w1");
  h.Beat("w3", "s-w3");
  h.Beat("w1", "s-w1", "job-000001");
  h.Beat("w3", "s-w3", "job-000001");
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  // Now w3 dies on its own (lost).
  for (int i = 0; i < 6; ++i) {
    h.Advance(absl::Seconds(1));
    h.Beat("w1", "s-w1", "job-000001");
    h.m().RunSchedulerPass();
  }
  const Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("failed again after 1 recovery "
                                      "(fault_tolerance.max_restarts=1): worker w3 (dp0 pp1 tp0) "
                                      "lost: no heartbeat"));
  EXPECT_THAT(job.reason(), HasSubstr("earlier failure 1 of 1 (recovered): worker w2 (dp0 pp1 "
                                      "tp0) stopped answering"));
}

TEST(Recovery, MaxRestartsZeroFailsAtOnce) {
  Harness h(TempDb("recover-none"));
  h.RunOn(2, Pp2Spec(R"("max_restarts": 0)"));
  KillW2(h);
  EXPECT_EQ(h.Get("job-000001").state(), FAILED);
  EXPECT_EQ(h.Get("job-000001").recoveries_size(), 0);
}

TEST(Recovery, BadInputIsNotRestarted) {
  Harness h(TempDb("recover-bad-input"));
  h.RunOn(2, Pp2Spec(""));
  ReportProgressRequest r;
  r.set_worker_id("w1");
  r.set_session_id("s-w1");
  r.set_job_id("job-000001");
  r.mutable_outcome()->set_error("dataset /d cannot be read on worker w1: No such file");
  r.mutable_outcome()->set_kind(FAILURE_LOCAL);
  r.mutable_outcome()->set_error_code(static_cast<int>(absl::StatusCode::kNotFound));
  ASSERT_TRUE(h.m().ReportProgress(r).ok());
  EXPECT_EQ(h.Get("job-000001").state(), FAILED);
}

TEST(Recovery, ShrinkContinuesOnFewerReplicasWithTheSameBatch) {
  Harness h(TempDb("recover-shrink"));
  h.RunOn(2, Pp2Spec("", R"("dp": 2)"));
  ASSERT_TRUE(h.Failure("w1", "job-000001", FAILURE_PEER, "all-reduce broke", {"w2"}).ok());
  h.Advance(absl::Seconds(3));
  h.Beat("w1", "s-w1");
  h.m().RunSchedulerPass();
  // First a settling window (2 heartbeat intervals) for workers that may be coming back.
  ASSERT_EQ(h.Get("job-000001").state(), RECOVERING);
  EXPECT_THAT(h.Get("job-000001").reason(),
              HasSubstr("(1 usable idle) before shrinking: workers may be coming back"));
  h.Advance(absl::Seconds(2));
  h.Beat("w1", "s-w1");
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  ASSERT_EQ(job.state(), PLACING);
  EXPECT_EQ(job.recoveries(0).layout().dp(), 1);
  EXPECT_EQ(job.placement().ranks_size(), 1);
  HeartbeatResponse hb = h.Beat("w1", "s-w1");
  EXPECT_EQ(hb.assignment().spec().parallel().dp(), 1);
  EXPECT_EQ(hb.assignment().spec().batch_size(), 4);
  EXPECT_EQ(hb.assignment().spec().micro_batch_size(), 2);  // 2 micro-batches now
  EXPECT_THAT(Events(h), HasSubstr("shrunk from dp=2 pp=1 tp=1 to dp=1 pp=1 tp=1 (batch_size 4: "
                                   "2 micro-batches per replica)"));
}

// A dp=2 job on w1, w2 loses w2 and shrinks onto w1 (dp=1), which trains step 11 there: its
// recovery is done.
void ShrinkOntoW1(Harness& h) {
  h.RunOn(2, Pp2Spec(R"("max_restarts": 1)", R"("dp": 2)"));
  ASSERT_TRUE(h.Failure("w1", "job-000001", FAILURE_PEER, "all-reduce broke", {"w2"}).ok());
  h.Advance(absl::Seconds(3));
  h.Beat("w1", "s-w1");
  h.m().RunSchedulerPass();
  h.Advance(absl::Seconds(2));  // the settling window before a shrink
  h.Beat("w1", "s-w1");
  h.m().RunSchedulerPass();
  h.Beat("w1", "s-w1");
  h.Beat("w1", "s-w1", "job-000001");
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);  // as dp=1 on w1
  ASSERT_TRUE(h.Step("w1", "s-w1", "job-000001", 11, 4.0).ok());
}

TEST(Recovery, AShrunkJobGrowsBackAtACheckpointWhenWorkersReturn) {
  Harness h(TempDb("recover-grow"));
  ShrinkOntoW1(h);
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 0);  // none idle
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());  // a worker comes (back)
  h.m().RunSchedulerPass();
  // Its rank is asked for a checkpoint at once: it grows back there, not at its next interval.
  EXPECT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 1);
  ReportProgressRequest sealed;
  sealed.set_worker_id("w1");
  sealed.set_session_id("s-w1");
  sealed.set_job_id("job-000001");
  sealed.mutable_checkpoint()->set_step(100);  // the last step's: nothing left to grow for
  sealed.mutable_checkpoint()->set_path("/c/job-000001/step_00000100");
  ASSERT_TRUE(h.m().ReportProgress(sealed).ok());
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  sealed.mutable_checkpoint()->set_step(20);
  sealed.mutable_checkpoint()->set_path("/c/job-000001/step_00000020");
  ASSERT_TRUE(h.m().ReportProgress(sealed).ok());
  Job job = h.Get("job-000001");
  ASSERT_EQ(job.state(), RECOVERING);
  ASSERT_EQ(job.recoveries_size(), 2);
  EXPECT_TRUE(job.recoveries(1).grow());
  EXPECT_THAT(job.reason(), HasSubstr("growing back to dp=2 pp=1 tp=1 at the checkpoint of "
                                      "step 20: 1 worker idle again; stopping its 1 rank"));
  h.Beat("w1", "s-w1");  // its run stopped
  h.m().RunSchedulerPass();
  job = h.Get("job-000001");
  EXPECT_EQ(job.state(), PLACING);
  EXPECT_EQ(job.placement().ranks_size(), 2);
  EXPECT_EQ(job.recoveries(1).layout().dp(), 2);
  // A grow back is not a failure: not counted against max_restarts, not named as one.
  const std::vector<Recovery> recoveries(job.recoveries().begin(), job.recoveries().end());
  EXPECT_EQ(FailureCount(recoveries), 1);
  EXPECT_THAT(ReasonNamingEveryFailure("x", recoveries), Not(HasSubstr("growing back")));
}

// The run a recovery stops trains on until the stop reaches it, and may seal a step there that
// the new run resumes from: the steps it reports meanwhile are recorded (without closing the
// recovery) until the new run's first step, which replaces the rows from its own first on.
TEST(Recovery, TheStoppedRunsLastStepsAreKeptUntilTheNewRunsFirst) {
  Harness h(TempDb("recover-stopped-steps"));
  ShrinkOntoW1(h);
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());
  h.m().RunSchedulerPass();
  ReportProgressRequest sealed;
  sealed.set_worker_id("w1");
  sealed.set_session_id("s-w1");
  sealed.set_job_id("job-000001");
  sealed.mutable_checkpoint()->set_step(20);
  sealed.mutable_checkpoint()->set_path("/c/job-000001/step_00000020");
  ASSERT_TRUE(h.m().ReportProgress(sealed).ok());
  ASSERT_EQ(h.Get("job-000001").state(), RECOVERING);  // growing back at step 20
  // w1 has not heard the stop yet: it reports steps 21 and 22.
  ReportProgressRequest run;
  run.set_worker_id("w1");
  run.set_session_id("s-w1");
  run.set_job_id("job-000001");
  for (int64_t step : {21, 22}) {
    StepMetrics* m = run.mutable_steps()->add_steps();
    m->set_step(step);
    m->set_loss(3.0);
  }
  ASSERT_TRUE(h.m().ReportProgress(run).ok());
  Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), RECOVERING);
  EXPECT_FALSE(job.recoveries(1).done());
  EXPECT_EQ(job.recoveries(1).last_step(), 22);
  auto steps = [&h] {
    std::vector<std::pair<int64_t, double>> out;
    const std::vector<StepMetrics> recorded = *h.m().store().MetricsAfter("job-000001", 0);
    for (const StepMetrics& m : recorded) out.push_back({m.step(), m.loss()});
    return out;
  };
  EXPECT_EQ(steps().back(), std::make_pair(int64_t{22}, 3.0));
  // Its other reports are not the job's any more.
  ReportProgressRequest line = sealed;
  line.set_event("late");
  EXPECT_EQ(h.m().ReportProgress(line).status().code(), absl::StatusCode::kFailedPrecondition);
  // The new run (dp=2 on w1 and w3) resumes from step 20, the seal the plan named.
  h.Beat("w1", "s-w1");  // its run stopped
  h.m().RunSchedulerPass();
  job = h.Get("job-000001");
  ASSERT_EQ(job.state(), PLACING);
  h.StartOn("w1", "job-000001");
  h.StartOn("w3", "job-000001");
  const std::string reporting = job.placement().ranks(0).worker_id();
  ASSERT_TRUE(h.Step(reporting, "s-" + reporting, "job-000001", 21, 2.5).ok());
  job = h.Get("job-000001");
  EXPECT_TRUE(job.recoveries(1).done());
  // Resumed before the step the stopped run reached: its rows from there on are the new run's.
  EXPECT_EQ(steps().back(), std::make_pair(int64_t{21}, 2.5));
}

// A worker with a rank in the stopped run and in the new one (w1 here) may deliver the stopped
// run's reports late, after the new run is placed (its queue held them while the coordinator
// was away): the report's attempt tells them apart. The stopped run's steps count as its own
// while the recovery is open; its other reports, and its steps after that, are answered OK and
// not recorded; they never end the recovery nor touch the new run.
TEST(Recovery, ALateReportOfTheStoppedRunIsNeverTakenForTheNewRunsFromAWorkerInBoth) {
  Harness h(TempDb("recover-late-attempt"));
  ShrinkOntoW1(h);
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());
  h.m().RunSchedulerPass();
  ASSERT_TRUE(h.Sealed("job-000001", 20, "/c/job-000001/step_00000020").ok());
  ASSERT_EQ(h.Get("job-000001").state(), RECOVERING);  // growing back at step 20
  h.Beat("w1", "s-w1");                                // its run stopped
  h.m().RunSchedulerPass();
  Job job = h.Get("job-000001");
  ASSERT_EQ(job.state(), PLACING);
  ASSERT_EQ(job.recoveries_size(), 2);  // the new run is run 2; w1's stopped one was run 1
  h.StartOn("w1", "job-000001");
  h.StartOn("w3", "job-000001");
  const JobState placed = h.Get("job-000001").state();
  auto late = [](int attempt) {
    ReportProgressRequest r;
    r.set_worker_id("w1");
    r.set_session_id("s-w1");
    r.set_job_id("job-000001");
    r.set_attempt(attempt);
    return r;
  };
  auto steps = [&h] {
    std::vector<std::pair<int64_t, double>> out;
    const std::vector<StepMetrics> recorded = *h.m().store().MetricsAfter("job-000001", 0);
    for (const StepMetrics& m : recorded) out.push_back({m.step(), m.loss()});
    return out;
  };
  ReportProgressRequest step = late(1);
  step.mutable_step()->set_step(21);
  step.mutable_step()->set_loss(3.0);
  ASSERT_TRUE(h.m().ReportProgress(step).ok());
  job = h.Get("job-000001");
  EXPECT_FALSE(job.recoveries(1).done()) << "the stopped run's step taken for the new run's";
  EXPECT_EQ(steps().back(), std::make_pair(int64_t{21}, 3.0));
  ReportProgressRequest line = late(1);
  line.set_event("a line of the stopped run");
  EXPECT_TRUE(h.m().ReportProgress(line).ok());
  ReportProgressRequest outcome = late(1);
  outcome.mutable_outcome()->set_error("rank 1 (w2) is gone");
  EXPECT_TRUE(h.m().ReportProgress(outcome).ok());
  EXPECT_EQ(h.Get("job-000001").state(), placed);
  EXPECT_THAT(Events(h), Not(HasSubstr("a line of the stopped run")));
  ReportProgressRequest ahead = late(3);
  ahead.set_event("from a run not made yet");
  EXPECT_EQ(h.m().ReportProgress(ahead).status().code(), absl::StatusCode::kInvalidArgument);
  // The new run's first step (its reports carry run 2) ends the recovery; a step of the stopped
  // run after it is not recorded.
  const std::string reporting = job.placement().ranks(0).worker_id();
  ReportProgressRequest first = late(2);
  first.set_worker_id(reporting);
  first.set_session_id("s-" + reporting);
  first.mutable_step()->set_step(21);
  first.mutable_step()->set_loss(2.5);
  ASSERT_TRUE(h.m().ReportProgress(first).ok());
  job = h.Get("job-000001");
  EXPECT_EQ(job.state(), RUNNING);
  EXPECT_TRUE(job.recoveries(1).done());
  step.mutable_step()->set_step(22);
  ASSERT_TRUE(h.m().ReportProgress(step).ok());
  EXPECT_EQ(steps().back(), std::make_pair(int64_t{21}, 2.5));
}

// A shrunk job whose submitted layout does not fit the idle workers (one too small for a rank)
// resumes on the layout it ran on instead of waiting for it until wait_for fails the job, and
// is not asked to grow back onto the same workers again; another idle worker asks again.
TEST(Recovery, AGrowBackThatDoesNotFitResumesOnTheLayoutItRanOn) {
  Harness h(TempDb("recover-grow-small"));
  ShrinkOntoW1(h);
  RegisterWorkerRequest small;  // idle, but 1 KiB: no rank of the job fits
  small.set_worker_id("w3");
  small.set_session_id("s-w3");
  small.set_address("w3:7071");
  small.set_host_label("host");
  small.mutable_device()->set_kind("cpu");
  small.mutable_device()->set_memory_bytes(1024);
  ASSERT_TRUE(h.m().RegisterWorker(small).ok());
  h.m().RunSchedulerPass();
  ASSERT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 1);
  ASSERT_TRUE(h.Sealed("job-000001", 20, "/c/job-000001/step_00000020").ok());
  ASSERT_EQ(h.Get("job-000001").state(), RECOVERING);  // growing back
  h.Beat("w1", "s-w1");                                // its run stopped
  h.Beat("w3", "s-w3");
  h.m().RunSchedulerPass();
  Job job = h.Get("job-000001");
  ASSERT_EQ(job.state(), PLACING) << job.reason();
  EXPECT_EQ(job.placement().ranks_size(), 1);
  EXPECT_THAT(Events(h),
              HasSubstr("the submitted layout does not fit the 2 usable idle workers ("));
  EXPECT_THAT(Events(h), HasSubstr("): resuming on the layout it ran on, dp=1 pp=1 tp=1"));
  h.Beat("w1", "s-w1");  // its assignment
  h.Beat("w1", "s-w1", "job-000001");
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  ASSERT_TRUE(h.Step("w1", "s-w1", "job-000001", 21, 4.0).ok());
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 0);  // not again
  ASSERT_TRUE(h.Register("w4", "s-w4").ok());  // a worker that may fit
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 1);
  ASSERT_TRUE(h.Sealed("job-000001", 22, "/c/job-000001/step_00000022").ok());
  for (const char* w : {"w1", "w3", "w4"}) h.Beat(w, absl::StrCat("s-", w));
  h.m().RunSchedulerPass();
  job = h.Get("job-000001");
  ASSERT_EQ(job.state(), PLACING) << job.reason();
  EXPECT_EQ(job.placement().ranks_size(), 2);  // dp=2 again, on w1 and w4
}

TEST(Recovery, WaitGivesUpAfterWaitFor) {
  Harness h(TempDb("recover-wait"));
  h.RunOn(2, Pp2Spec(R"("on_worker_loss": "wait", "wait_for": "10s")"));
  KillW2(h);
  ASSERT_EQ(h.Get("job-000001").state(), RECOVERING);
  EXPECT_THAT(h.Get("job-000001").reason(), HasSubstr("waiting up to 10.0s"));
  h.Advance(absl::Seconds(11));
  h.Beat("w1", "s-w1");
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("recovery 1 found no workers"));
  EXPECT_THAT(job.reason(), HasSubstr("worker w2 (dp0 pp1 tp0) stopped answering"));
}

TEST(Recovery, ACoordinatorRestartDuringRecoveringGoesOn) {
  const std::string db = TempDb("recover-restart");
  Harness h(db);
  h.RunOn(2, Pp2Spec(R"("on_worker_loss": "wait")"));
  KillW2(h);
  ASSERT_EQ(h.Get("job-000001").state(), RECOVERING);
  h.Open();  // the coordinator restarts
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Register("w4", "s-w4").ok());  // a new worker
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), PLACING);
  EXPECT_EQ(job.recoveries_size(), 1);
  EXPECT_EQ(h.Beat("w4", "s-w4").assignment().attempt(), 1);
}

TEST(Recovery, AWorkerThatFailedTheJobTwiceIsNotPlacedOnItAgain) {
  Harness h(TempDb("recover-twice-same"));
  h.RunOn(2, Pp2Spec(R"("on_worker_loss": "wait")"));
  // w2 fails twice (it comes back idle each time and is placed again), then it is left out.
  for (int round = 1; round <= 2; ++round) {
    ReportProgressRequest r;  // a transient error of w2's own: curable
    r.set_worker_id("w2");
    r.set_session_id("s-w2");
    r.set_job_id("job-000001");
    r.mutable_outcome()->set_error("connection reset");
    r.mutable_outcome()->set_kind(FAILURE_LOCAL);
    r.mutable_outcome()->set_error_code(static_cast<int>(absl::StatusCode::kUnavailable));
    ASSERT_TRUE(h.m().ReportProgress(r).ok());
    h.Beat("w1", "s-w1");  // w1's run stopped
    h.Beat("w2", "s-w2");  // w2 left its failed run (idle only now)
    h.m().RunSchedulerPass();
    ASSERT_EQ(h.Get("job-000001").recoveries_size(), round);
    if (round == 2) break;
    ASSERT_EQ(h.Get("job-000001").state(), PLACING) << h.Get("job-000001").reason();
    h.Beat("w1", "s-w1");
    h.Beat("w2", "s-w2");
    h.Beat("w1", "s-w1", "job-000001");
    h.Beat("w2", "s-w2", "job-000001");
    ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  }
  const Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), RECOVERING);
  EXPECT_THAT(job.reason(), HasSubstr("(not w2: failed this job twice)"));
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());
  h.m().RunSchedulerPass();
  const Job placed = h.Get("job-000001");
  std::vector<std::string> workers;
  for (const RankAssignment& rank : placed.placement().ranks()) workers.push_back(rank.worker_id());
  EXPECT_THAT(workers, UnorderedElementsAre("w1", "w3"));
}

TEST(Recovery, AWorkerThatFailedTheJobTwiceIsNotUsedAgain) {
  Recovery a, b, c;
  a.set_failed_worker("w2");
  b.set_failed_worker("w3");
  c.set_failed_worker("w2");
  const std::vector<Recovery> recoveries = {a, b, c};
  EXPECT_THAT(WorkersFailedTwice(recoveries), UnorderedElementsAre("w2"));
  EXPECT_TRUE(WorkersFailedTwice({a, b}).empty());
}

TEST(Recovery, AStragglerReplaceTakesNoWorkerReplacedBeforeNorOneThatFailedTwice) {
  Recovery a, b, c;
  a.set_failed_worker("w2");
  b.set_replaced_worker("w4");
  c.set_failed_worker("w2");
  EXPECT_THAT(NotSparesForReplace({a, b, c}), UnorderedElementsAre("w2", "w4"));
  EXPECT_THAT(NotSparesForReplace({a, b}), UnorderedElementsAre("w4"));
  EXPECT_TRUE(NotSparesForReplace({a}).empty());
}

// The coordinator's own process was stopped for three leases (SIGSTOP, a VM stall): the
// workers' silence was its own, so nobody is lost and no restart is used.
TEST(Recovery, APauseOfTheCoordinatorLosesNoWorkerAndUsesNoRestart) {
  auto mono = std::make_shared<absl::Duration>(absl::Seconds(1));
  Harness h(TempDb("recover-pause"),
            [mono](JobManager::Options* o) { o->monotonic_clock = [mono] { return *mono; }; });
  h.RunOn(2, Pp2Spec(R"("max_restarts": 1)"));
  h.Advance(3 * kLease);
  *mono += 3 * kLease;
  h.m().RunSchedulerPass();
  Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), RUNNING);
  EXPECT_EQ(job.recoveries_size(), 0);
  EXPECT_THAT(Events(h), HasSubstr("the coordinator's own process did not run for 15.0s"));
  h.Beat("w1", "s-w1", "job-000001");
  h.Beat("w2", "s-w2", "job-000001");
  *mono += absl::Milliseconds(200);
  h.Advance(absl::Milliseconds(200));
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  // The grace is one lease: a worker still silent after it is lost as before.
  for (int i = 0; i < 30; ++i) {
    *mono += absl::Milliseconds(200);
    h.Advance(absl::Milliseconds(200));
    h.Beat("w1", "s-w1", "job-000001");
    h.m().RunSchedulerPass();
  }
  job = h.Get("job-000001");
  EXPECT_EQ(job.state(), RECOVERING);
  ASSERT_EQ(job.recoveries_size(), 1);
  EXPECT_EQ(job.recoveries(0).failed_worker(), "w2");
}

// Rank 0 died after sealing the last step's checkpoint: the job is done. The recovery's run
// only exports the weights; not a failure, whatever max_restarts says.
TEST(Recovery, AJobWhoseLastStepIsSealedFinishesInsteadOfFailing) {
  Harness h(TempDb("recover-finish"));
  h.RunOn(2, Pp2Spec(R"("max_restarts": 0)"));
  ReportProgressRequest sealed;
  sealed.set_worker_id("w1");
  sealed.set_session_id("s-w1");
  sealed.set_job_id("job-000001");
  sealed.mutable_checkpoint()->set_step(100);
  sealed.mutable_checkpoint()->set_path("/c/job-000001/step_00000100");
  ASSERT_TRUE(h.m().ReportProgress(sealed).ok());
  ASSERT_TRUE(h.Failure("w2", "job-000001", FAILURE_PEER, "stream to rank 0 broke", {"w1"}).ok());
  h.Advance(absl::Seconds(3));
  h.Beat("w2", "s-w2");
  h.m().RunSchedulerPass();
  ASSERT_EQ(h.Get("job-000001").state(), RECOVERING);
  h.Beat("w1", "s-w1");  // (rank 0's process is back, without the job)
  h.m().RunSchedulerPass();
  Job job = h.Get("job-000001");
  ASSERT_EQ(job.state(), PLACING) << job.reason();
  std::string reasons;
  for (const StateChange& c : job.history()) absl::StrAppend(&reasons, c.reason(), "\n");
  EXPECT_THAT(reasons, HasSubstr("step 100, the last, is sealed: finishing the job from it "
                                 "(not a failure)"));
  ASSERT_EQ(job.recoveries_size(), 1);
  EXPECT_TRUE(job.recoveries(0).finishing());
  const std::vector<Recovery> recoveries(job.recoveries().begin(), job.recoveries().end());
  EXPECT_EQ(FailureCount(recoveries), 0);
  h.Beat("w1", "s-w1");
  h.Beat("w2", "s-w2");
  h.Beat("w1", "s-w1", "job-000001");
  h.Beat("w2", "s-w2", "job-000001");
  ASSERT_TRUE(Location(h, "w1", 100).ok());
  ASSERT_TRUE(h.Outcome("w2", "s-w2", "job-000001", true, "").ok());
  ASSERT_TRUE(h.Outcome("w1", "s-w1", "job-000001", true, "/c/job-000001/model.safetensors").ok());
  job = h.Get("job-000001");
  EXPECT_EQ(job.state(), SUCCEEDED) << job.reason();
  EXPECT_THAT(job.reason(), HasSubstr("finished 100 steps; weights at /c/job-000001/model"));
  EXPECT_TRUE(job.recoveries(0).done());
  EXPECT_EQ(job.recoveries(0).steps_redone(), 0);
}

// A worker stopped on purpose (SIGTERM: it deregisters) is maintenance: the job restarts from
// its checkpoint without using one of max_restarts.
TEST(Recovery, ASigtermedWorkerRestartsTheJobWithoutCountingAFailure) {
  Harness h(TempDb("recover-sigterm"));
  h.RunOn(2, Pp2Spec(R"("max_restarts": 0)"));
  DeregisterWorkerRequest stop;
  stop.set_worker_id("w2");
  stop.set_session_id("s-w2");
  stop.set_reason("worker stopped by SIGTERM");
  stop.set_running_job_id("job-000001");
  stop.set_running_step(12);
  ASSERT_TRUE(h.m().DeregisterWorker(stop).ok());
  const Job job = h.Get("job-000001");
  ASSERT_EQ(job.state(), RECOVERING) << job.reason();
  EXPECT_THAT(job.reason(), HasSubstr("maintenance (not counted against max_restarts): worker w2"));
  ASSERT_EQ(job.recoveries_size(), 1);
  EXPECT_TRUE(job.recoveries(0).maintenance());
  const std::vector<Recovery> recoveries(job.recoveries().begin(), job.recoveries().end());
  EXPECT_EQ(FailureCount(recoveries), 0);
}

// A one-worker job whose worker went silent: detect is the silence (the lease), not 0.
TEST(Recovery, TheDetectPhaseOfALostOneWorkerJobIsItsSilence) {
  Harness h(TempDb("recover-detect"));
  h.RunOn(1, absl::StrCat(R"({"checkpoint": {"dir": "/c", "interval_steps": 10}, )",
                          R"("dataset": "/d", "steps": 100, "batch_size": 4, )",
                          R"("fault_tolerance": {"max_restarts": 1}, "model": {"vocab_size": )",
                          R"(256, "context": 32, "n_layer": 2, "n_head": 2, "n_embd": 32}})"));
  h.Advance(kLease + absl::Seconds(1));
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  ASSERT_EQ(job.recoveries_size(), 1) << job.reason();
  EXPECT_EQ(job.recoveries(0).detect_ms(), 6000);
}

// Steps the old run made that the coordinator never heard of (its reports were lost, or it
// was paused) still count as redone: the old ranks' heartbeats say how far they got.
TEST(Recovery, StepsRedoneCountTheOldRunsStepsTheCoordinatorDidNotHear) {
  Harness h(TempDb("recover-redone"));
  h.RunOn(2, Pp2Spec(R"("max_restarts": 1)"));
  ASSERT_TRUE(h.Step("w2", "s-w2", "job-000001", 20, 4.0).ok());  // w2: the reporting rank
  KillW2(h);                   // w1 blames w2; the recovery begins at the last step heard, 20
  RegisterWorkerRequest back;  // w1 registers again (after a pause): it was at step 31
  back.set_worker_id("w1");
  back.set_session_id("s-w1");
  back.set_running_job_id("job-000001");
  back.set_running_step(31);
  ASSERT_TRUE(h.m().RegisterWorker(back).ok());
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  ASSERT_EQ(job.recoveries_size(), 1);
  EXPECT_EQ(job.recoveries(0).last_step(), 31);
}

// `dtrain workers drain w2`: w2 takes no new job; its job moves off it at the next sealed
// checkpoint (a maintenance restart); once idle it is DRAINED; its restart undrains it.
TEST(Recovery, ADrainedWorkersJobMovesOffItAtTheNextSealedCheckpoint) {
  Harness h(TempDb("recover-drain"));
  h.RunOn(2, Pp2Spec(R"("max_restarts": 0)"));
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());  // a spare
  DrainWorkerRequest drain;
  drain.set_worker_id("w2");
  drain.set_drain(true);
  absl::StatusOr<DrainWorkerResponse> r = h.m().DrainWorker(drain);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->job_id(), "job-000001");
  EXPECT_FALSE(r->moved_now());
  EXPECT_TRUE(r->worker().draining());
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);  // until its next sealed checkpoint
  ReportProgressRequest sealed;
  sealed.set_worker_id("w1");
  sealed.set_session_id("s-w1");
  sealed.set_job_id("job-000001");
  sealed.mutable_checkpoint()->set_step(10);
  sealed.mutable_checkpoint()->set_path("/c/job-000001/step_00000010");
  ASSERT_TRUE(h.m().ReportProgress(sealed).ok());
  Job job = h.Get("job-000001");
  ASSERT_EQ(job.state(), RECOVERING) << job.reason();
  EXPECT_THAT(job.reason(), HasSubstr("maintenance (not counted against max_restarts): worker "
                                      "w2 drained"));
  ASSERT_EQ(job.recoveries_size(), 1);
  EXPECT_TRUE(job.recoveries(0).maintenance());
  h.Beat("w1", "s-w1");
  h.Beat("w2", "s-w2");  // both stopped the run
  h.m().RunSchedulerPass();
  job = h.Get("job-000001");
  ASSERT_EQ(job.state(), PLACING) << job.reason();
  EXPECT_THAT(job.recoveries(0).workers(), UnorderedElementsAre("w1", "w3"));
  std::map<std::string, WorkerInfo> workers;
  const ListWorkersResponse listed = h.m().ListWorkers();
  for (const WorkerInfo& w : listed.workers()) workers[w.worker_id()] = w;
  EXPECT_EQ(workers["w2"].state(), DRAINED);
  // Stopped (SIGTERM: it deregisters, idle: nothing to recover) and started again: its new
  // session takes jobs again.
  DeregisterWorkerRequest stop;
  stop.set_worker_id("w2");
  stop.set_session_id("s-w2");
  stop.set_reason("worker stopped by SIGTERM");
  ASSERT_TRUE(h.m().DeregisterWorker(stop).ok());
  EXPECT_EQ(h.Get("job-000001").recoveries_size(), 1);
  ASSERT_TRUE(h.Register("w2", "s-w2-again").ok());
  const ListWorkersResponse again = h.m().ListWorkers();
  for (const WorkerInfo& w : again.workers()) {
    if (w.worker_id() == "w2") {
      EXPECT_EQ(w.state(), IDLE);
    }
  }
}

// A drain outlives a coordinator restart (an operator's maintenance does not end because the
// coordinator was upgraded): the same session registering again is still drained, its job
// still moves off it at the next sealed checkpoint; a new session of the worker is back.
TEST(Recovery, ADrainOutlivesACoordinatorRestartNotTheWorkersOwn) {
  Harness h(TempDb("recover-drain-restart"));
  h.RunOn(2, Pp2Spec(R"("max_restarts": 0)"));
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());
  DrainWorkerRequest drain;
  drain.set_drain(true);
  for (const char* w : {"w2", "w3"}) {
    drain.set_worker_id(w);
    ASSERT_TRUE(h.m().DrainWorker(drain).ok()) << w;
  }
  h.Open();  // the coordinator restarts
  EXPECT_THAT(h.Log(),
              HasSubstr("2 workers drained before this restart (w2, w3): each is drained again "
                        "when the same session registers"));
  for (const char* w : {"w1", "w2"}) {
    ASSERT_TRUE(h.Register(w, absl::StrCat("s-", w), "job-000001").ok()) << w;
  }
  ASSERT_TRUE(h.Register("w3", "s-w3-new").ok());  // restarted meanwhile: back
  EXPECT_THAT(h.Log(), HasSubstr("worker w2 is still drained (its session was drained before this "
                                 "coordinator started)"));
  std::map<std::string, WorkerInfo> workers;
  const ListWorkersResponse listed = h.m().ListWorkers();
  for (const WorkerInfo& w : listed.workers()) workers[w.worker_id()] = w;
  EXPECT_TRUE(workers["w2"].draining());
  EXPECT_FALSE(workers["w3"].draining());
  EXPECT_FALSE(workers["w1"].draining());
  h.m().RunSchedulerPass();
  // Its job is asked for a checkpoint and moves off it there.
  EXPECT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 1);
  ASSERT_TRUE(h.Sealed("job-000001", 3, "/c/job-000001/step_00000003").ok());
  const Job job = h.Get("job-000001");
  ASSERT_EQ(job.state(), RECOVERING) << job.reason();
  EXPECT_THAT(job.reason(), HasSubstr("worker w2 drained"));
  // And again after another restart: w3's drain was forgotten, w2's kept.
  h.Open();
  EXPECT_THAT(h.Log(), HasSubstr("1 worker drained before this restart (w2)"));
}

// The checkpoint a drain waits for is skipped by every rank (a full disk): the job moves off
// the drained worker now, from its latest sealed checkpoint, instead of at the next interval's.
TEST(Recovery, ADrainWhoseCheckpointIsSkippedMovesTheJobNow) {
  Harness h(TempDb("recover-drain-skipped"));
  h.RunOn(2, Pp2Spec(R"("max_restarts": 0)"));
  ASSERT_TRUE(h.Step("w2", "s-w2", "job-000001", 4, 4.0).ok());
  DrainWorkerRequest drain;
  drain.set_worker_id("w2");
  drain.set_drain(true);
  ASSERT_TRUE(h.m().DrainWorker(drain).ok());
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  ASSERT_TRUE(h.Skipped("job-000001", 5, "rank 0: no space left on /c").ok());
  const Job job = h.Get("job-000001");
  ASSERT_EQ(job.state(), RECOVERING) << job.reason();
  EXPECT_THAT(job.reason(), HasSubstr("worker w2 drained"));
  EXPECT_TRUE(job.recoveries(0).maintenance());
}

TEST(Recovery, DrainNowMovesTheJobAtOnceAndUndrainReturnsTheWorker) {
  Harness h(TempDb("recover-drain-now"));
  h.RunOn(2, Pp2Spec(R"("max_restarts": 0)"));
  DrainWorkerRequest drain;
  drain.set_worker_id("w1");
  drain.set_drain(true);
  drain.set_now(true);
  absl::StatusOr<DrainWorkerResponse> r = h.m().DrainWorker(drain);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->moved_now());
  EXPECT_EQ(h.Get("job-000001").state(), RECOVERING);
  drain.set_drain(false);
  ASSERT_TRUE(h.m().DrainWorker(drain).ok());
  h.Beat("w1", "s-w1");
  h.Beat("w2", "s-w2");
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), PLACING);  // on w1 and w2 again
  drain.set_worker_id("nobody");
  EXPECT_EQ(h.m().DrainWorker(drain).status().code(), absl::StatusCode::kNotFound);
}

// Save first, then act: a recovery the store cannot record changes nothing (the job stays
// RUNNING, no worker is told to stop, no recovery is kept in memory) and the next pass, deciding
// again from the same record, begins it once the store answers.
TEST(Recovery, ARecoveryTheStoreCannotRecordIsNotActedOnAndIsRetried) {
  const std::string db = TempDb("recover-save-first");
  Harness h(db);
  h.RunOn(2, Pp2Spec(""));
  ASSERT_TRUE(h.Failure("w1", "job-000001", FAILURE_PEER, "stream to rank 1 broke", {"w2"}).ok());
  // Another connection holds the write lock: the store's writes fail (after its 5 s busy wait).
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  h.Advance(absl::Seconds(3));  // past the failure window
  h.Beat("w1", "s-w1");         // w1's runner ended; w2 is silent
  h.m().RunSchedulerPass();
  EXPECT_THAT(h.Log(), HasSubstr("cannot record its recovery (the next pass tries again)"));
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), RUNNING);
  EXPECT_EQ(job.recoveries_size(), 0);
  h.m().RunSchedulerPass();
  job = h.Get("job-000001");
  EXPECT_THAT(States(job), ElementsAre(QUEUED, PLACING, RUNNING, RECOVERING));
  ASSERT_EQ(job.recoveries_size(), 1);
  EXPECT_EQ(job.recoveries(0).number(), 1);
  EXPECT_EQ(job.recoveries(0).failed_worker(), "w2");
  // The run's ranks were kept for the retry: the surviving one is told to stop.
  EXPECT_THAT(h.Log(), HasSubstr("job-000001: RUNNING -> RECOVERING: restart 1 of 3: "));
  EXPECT_THAT(h.Log(), HasSubstr("; stopping the other 1 rank"));
}

}  // namespace
}  // namespace dtrain::coordinator
