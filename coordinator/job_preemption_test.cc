// Preemption (JobManager::Options::preempt_after), through the JobManager's RPCs and passes
// with a clock the test moves: a queued job of a higher priority takes the workers of a running
// one of a lower priority at that job's next sealed checkpoint; the preempted job waits as a
// queued job of its priority would and resumes from that checkpoint, nothing counted against
// max_restarts.
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
using ::testing::Not;

// A pp=2 job of `priority`, checkpointing every 10 of its 100 steps (interval 0: none).
std::string Spec(const std::string& name, int priority, int interval = 10) {
  return absl::StrCat(R"({"name": ")", name, R"(", "priority": )", priority,
                      R"(, "parallel": {"pp": 2}, "checkpoint": {"dir": "/c", "interval_steps": )",
                      interval,
                      R"(}, "dataset": "/d", "steps": 100, "batch_size": 4, )"
                      R"("fault_tolerance": {"max_restarts": 0}, "model": {"vocab_size": 256, )"
                      R"("context": 32, "n_layer": 2, "n_head": 2, "n_embd": 32}})");
}

std::string Events(Harness& h, const std::string& job) {
  std::vector<std::string> texts;
  const absl::StatusOr<std::vector<JobEvent>> events = h.m().store().EventsFor(job);
  for (const JobEvent& e : *events) texts.push_back(e.text);
  return absl::StrJoin(texts, "\n");
}

// A lease of an hour: the test's clock moves by minutes without every worker's heartbeat.
void Tune(JobManager::Options* o) {
  o->lease = absl::Hours(1);
  o->preempt_after = absl::Seconds(30);
}

TEST(Preemption, AJobOfAHigherPriorityTakesTheWorkersAtTheNextSealedCheckpoint) {
  Harness h(TempDb("preempt"), Tune);
  h.RunOn(2, Spec("long", 0));                    // job-000001 on w1, w2
  ASSERT_TRUE(h.Submit(Spec("urgent", 5)).ok());  // job-000002: needs both
  h.m().RunSchedulerPass();
  EXPECT_THAT(Events(h, "job-000001"), Not(HasSubstr("preempted")));  // not waited long yet
  EXPECT_THAT(h.Get("job-000002").reason(),
              HasSubstr("waiting for 2 idle workers; 0 idle, 2 busy, 0 lost; it preempts jobs of "
                        "a lower priority once queued for 30s (--preempt_after)"));
  h.Advance(absl::Seconds(31));
  h.m().RunSchedulerPass();
  EXPECT_THAT(Events(h, "job-000001"),
              HasSubstr("preempted by job-000002 (priority 5, above this job's 0; queued 31s for "
                        "2 workers): it yields its 2 workers at its next sealed checkpoint"));
  EXPECT_THAT(Events(h, "job-000002"), HasSubstr("preempting job-000001 (priority 0, 2 workers)"));
  EXPECT_THAT(h.Get("job-000002").reason(),
              HasSubstr("2 workers of jobs of a lower priority come free at their next sealed "
                        "checkpoints (preempted)"));
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);  // until its checkpoint: no step is lost
  h.m().RunSchedulerPass();                         // chosen once
  // Its workers are asked for that checkpoint at once (nothing sealed yet: a step after 0),
  // not left to reach step 10 by its interval.
  for (const char* w : {"w1", "w2"}) {
    const HeartbeatResponse beat = h.Beat(w, absl::StrCat("s-", w), "job-000001");
    ASSERT_EQ(beat.checkpoint_requests_size(), 1) << w;
    EXPECT_EQ(beat.checkpoint_requests(0).job_id(), "job-000001");
    EXPECT_EQ(beat.checkpoint_requests(0).after_step(), 0);
  }
  ASSERT_TRUE(h.Sealed("job-000001", 10, "/c/job-000001/step_00000010").ok());
  Job preempted = h.Get("job-000001");
  ASSERT_EQ(preempted.state(), RECOVERING) << preempted.reason();
  EXPECT_THAT(preempted.reason(), HasSubstr("preempted by job-000002 (priority 5): yielding its "
                                            "workers at the checkpoint of step 10"));
  ASSERT_EQ(preempted.recoveries_size(), 1);
  EXPECT_EQ(preempted.recoveries(0).preempted_by(), "job-000002");
  EXPECT_EQ(RecoveryKind(preempted.recoveries(0)), "preempted");
  const std::vector<Recovery> recoveries(preempted.recoveries().begin(),
                                         preempted.recoveries().end());
  EXPECT_EQ(FailureCount(recoveries), 0);
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 0);  // answered
  // Its workers stop: they go to the urgent job, not back to it.
  h.Beat("w1", "s-w1");
  h.Beat("w2", "s-w2");
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000002").state(), PLACING);
  preempted = h.Get("job-000001");
  EXPECT_EQ(preempted.state(), RECOVERING);
  EXPECT_THAT(preempted.reason(), HasSubstr("preempted by job-000002: waiting for 2 idle workers "
                                            "(2 usable idle) behind 1 queued job of a higher "
                                            "priority; it resumes from its latest sealed "
                                            "checkpoint"));
  for (const char* w : {"w1", "w2"}) h.Beat(w, absl::StrCat("s-", w));  // their assignments
  h.m().RunSchedulerPass();
  EXPECT_THAT(h.Get("job-000001").reason(),
              HasSubstr("preempted by job-000002: waiting for 2 idle workers (0 usable idle); it "
                        "resumes from its latest sealed checkpoint"));
  // It waits as long as it takes (not fault_tolerance.wait_for, 60 s).
  h.Advance(absl::Minutes(10));
  for (const char* w : {"w1", "w2"}) h.Beat(w, absl::StrCat("s-", w), "job-000002");
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), RECOVERING);
  EXPECT_EQ(h.Get("job-000002").state(), RUNNING);
  // The urgent job ends: the preempted one resumes on the workers freed.
  for (const char* w : {"w1", "w2"}) {
    ASSERT_TRUE(h.Outcome(w, absl::StrCat("s-", w), "job-000002", true, "/c/job-000002").ok());
  }
  EXPECT_EQ(h.Get("job-000002").state(), SUCCEEDED);
  h.Beat("w1", "s-w1");
  h.Beat("w2", "s-w2");
  h.m().RunSchedulerPass();
  preempted = h.Get("job-000001");
  EXPECT_EQ(preempted.state(), PLACING) << preempted.reason();
  EXPECT_THAT(preempted.recoveries(0).workers(), ElementsAre("w1", "w2"));
}

// Runs job-000001 (priority 0) on w1 and w2 and has job-000002 (priority 5) preempt it.
void Preempt(Harness& h) {
  h.RunOn(2, Spec("long", 0));
  ASSERT_TRUE(h.Submit(Spec("urgent", 5)).ok());
  h.Advance(absl::Seconds(31));
  h.m().RunSchedulerPass();
  ASSERT_THAT(Events(h, "job-000002"), HasSubstr("preempting job-000001"));
}

TEST(Preemption, AWaitingJobCancelledBeforeTheSealLeavesItsVictimRunning) {
  Harness h(TempDb("preempt-cancelled"), Tune);
  Preempt(h);
  ASSERT_TRUE(h.m().CancelJob("job-000002", "").ok());
  ASSERT_TRUE(h.Sealed("job-000001", 10, "/c/job-000001/step_00000010").ok());
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  EXPECT_EQ(h.Get("job-000001").recoveries_size(), 0);
  EXPECT_THAT(Events(h, "job-000001"),
              HasSubstr("no longer preempted: job-000002 is not queued any more"));
  // And the job may be preempted again later, by another.
  ASSERT_TRUE(h.Submit(Spec("urgent-again", 5)).ok());  // job-000003
  h.Advance(absl::Seconds(31));
  h.m().RunSchedulerPass();
  ASSERT_TRUE(h.Sealed("job-000001", 20, "/c/job-000001/step_00000020").ok());
  EXPECT_EQ(h.Get("job-000001").state(), RECOVERING);
  EXPECT_EQ(h.Get("job-000001").recoveries(0).preempted_by(), "job-000003");
}

TEST(Preemption, APreemptedJobStillWaitsItsTurnAfterACoordinatorRestart) {
  Harness h(TempDb("preempt-restart"), Tune);
  Preempt(h);
  ASSERT_TRUE(h.Sealed("job-000001", 10, "/c/job-000001/step_00000010").ok());
  ASSERT_EQ(h.Get("job-000001").state(), RECOVERING);
  h.Open();  // the coordinator restarts before the urgent job is placed
  for (const char* w : {"w1", "w2"}) {
    ASSERT_TRUE(h.Register(w, absl::StrCat("s2-", w)).ok());  // idle: the old run stopped
  }
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000002").state(), PLACING);
  const Job preempted = h.Get("job-000001");
  EXPECT_EQ(preempted.state(), RECOVERING);
  EXPECT_THAT(preempted.reason(), HasSubstr("preempted by job-000002"));
}

TEST(Preemption, NoJobOfTheSamePriorityIsPreempted) {
  Harness h(TempDb("preempt-none"), Tune);
  h.RunOn(2, Spec("same", 5));
  ASSERT_TRUE(h.Submit(Spec("urgent", 5)).ok());  // job-000002
  h.Advance(absl::Minutes(5));
  h.m().RunSchedulerPass();
  EXPECT_THAT(Events(h, "job-000002"), Not(HasSubstr("preempting")));
  EXPECT_THAT(h.Get("job-000002").reason(), Not(HasSubstr("preempt")));
  EXPECT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 0);
}

// interval_steps 0 (a checkpoint only at the end) does not shelter a job: its ranks seal the
// checkpoint they are asked for like any other's, and it resumes from it.
TEST(Preemption, AJobWithoutPeriodicCheckpointsYieldsAtTheOneItIsAskedFor) {
  Harness h(TempDb("preempt-interval-0"), Tune);
  h.RunOn(2, Spec("end-only", 0, /*interval=*/0));
  ASSERT_TRUE(h.Step("w2", "s-w2", "job-000001", 7, 4.0).ok());
  ASSERT_TRUE(h.Submit(Spec("urgent", 5)).ok());
  h.Advance(absl::Seconds(31));
  h.m().RunSchedulerPass();
  EXPECT_THAT(Events(h, "job-000001"), HasSubstr("preempted by job-000002"));
  h.m().RunSchedulerPass();
  const HeartbeatResponse beat = h.Beat("w1", "s-w1", "job-000001");
  ASSERT_EQ(beat.checkpoint_requests_size(), 1);
  EXPECT_EQ(beat.checkpoint_requests(0).after_step(), 0);
  ASSERT_TRUE(h.Sealed("job-000001", 8, "/c/job-000001/step_00000008").ok());
  const Job preempted = h.Get("job-000001");
  ASSERT_EQ(preempted.state(), RECOVERING) << preempted.reason();
  EXPECT_THAT(preempted.reason(), HasSubstr("yielding its workers at the checkpoint of step 8"));
}

// Every rank skipped the checkpoint asked for (a full disk): asking again would skip again, so
// the preemption goes ahead from the latest sealed checkpoint instead of holding the waiting
// job until the next interval, and says which steps are trained again.
TEST(Preemption, ACheckpointSkippedWhileYieldingYieldsNowFromTheLatestSealedOne) {
  Harness h(TempDb("preempt-skipped"), Tune);
  h.RunOn(2, Spec("long", 0));
  ASSERT_TRUE(h.Sealed("job-000001", 10, "/c/job-000001/step_00000010").ok());
  ASSERT_TRUE(h.Step("w2", "s-w2", "job-000001", 14, 4.0).ok());
  ASSERT_TRUE(h.Submit(Spec("urgent", 5)).ok());
  h.Advance(absl::Seconds(31));
  h.m().RunSchedulerPass();
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  ASSERT_TRUE(h.Step("w2", "s-w2", "job-000001", 15, 4.0).ok());
  ASSERT_TRUE(h.Skipped("job-000001", 15, "rank 1: no space left on /c").ok());
  const Job preempted = h.Get("job-000001");
  ASSERT_EQ(preempted.state(), RECOVERING) << preempted.reason();
  EXPECT_THAT(preempted.reason(), HasSubstr("yielding its workers at the checkpoint of step 10"));
  EXPECT_EQ(preempted.recoveries(0).preempted_by(), "job-000002");
  EXPECT_THAT(Events(h, "job-000001"),
              HasSubstr("the checkpoint of step 15 was skipped (rank 1: no space left on /c): the "
                        "preemption goes ahead now, from the checkpoint of step 10; steps 11-15 "
                        "are trained again"));
}

// `dtrain checkpoint JOB`: a running job's workers are asked for a checkpoint after its last
// sealed step until one is sealed; a job not running is refused naming its state.
TEST(CheckpointJob, ARunningJobIsAskedUntilAStepAfterItsLastSealedOneIsSealed) {
  Harness h(TempDb("checkpoint-now"), Tune);
  h.RunOn(2, Spec("long", 0));  // job-000001 on w1, w2, every 10 steps
  ASSERT_TRUE(h.Submit(Spec("later", 0)).ok());
  const absl::Status queued = h.m().CheckpointJob("job-000002", "alice").status();
  EXPECT_EQ(queued.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(queued.message(), "job-000002 is QUEUED: only a running job is asked for a checkpoint");
  EXPECT_EQ(h.m().CheckpointJob("job-000009", "alice").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 0);
  ASSERT_TRUE(h.Sealed("job-000001", 10, "/c/job-000001/step_00000010").ok());
  ASSERT_TRUE(h.m().CheckpointJob("job-000001", "alice").ok());
  EXPECT_THAT(Events(h, "job-000001"), HasSubstr("checkpoint asked for by alice: its ranks take it "
                                                 "at their next step (last sealed: step 10)"));
  for (const char* w : {"w1", "w2"}) {
    const HeartbeatResponse beat = h.Beat(w, absl::StrCat("s-", w), "job-000001");
    ASSERT_EQ(beat.checkpoint_requests_size(), 1) << w;
    EXPECT_EQ(beat.checkpoint_requests(0).after_step(), 10);
  }
  h.m().RunSchedulerPass();  // still wanted: nothing after step 10 sealed
  EXPECT_EQ(h.Beat("w2", "s-w2", "job-000001").checkpoint_requests_size(), 1);
  ASSERT_TRUE(h.Sealed("job-000001", 13, "/c/job-000001/step_00000013").ok());
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 0);
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);  // a checkpoint, not a restart

  // Asked again, and every rank skips the step (a full disk): the ask is answered, and the
  // job's checkpoint status says which step and why (what `dtrain checkpoint` ends on).
  ASSERT_TRUE(h.m().CheckpointJob("job-000001", "alice").ok());
  ASSERT_TRUE(h.Skipped("job-000001", 15, "rank 1: no space left on /c").ok());
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Beat("w1", "s-w1", "job-000001").checkpoint_requests_size(), 0);
  const Job job = h.Get("job-000001");
  EXPECT_EQ(job.checkpoint().last_skipped_step(), 15);
  EXPECT_EQ(job.checkpoint().last_skip_reason(), "rank 1: no space left on /c");
  EXPECT_EQ(job.checkpoint().last_sealed_step(), 13);
}

TEST(Priority, AJobsPriorityChangesWhileItHasNotEnded) {
  Harness h(TempDb("set-priority"));
  for (const char* name : {"a", "b", "c"}) ASSERT_TRUE(h.Submit(Spec(name, 0)).ok());
  EXPECT_EQ(h.Get("job-000003").queue_position(), 3);
  absl::StatusOr<Job> raised = h.m().SetJobPriority("job-000003", 7, "alice");
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->spec().priority(), 7);
  EXPECT_EQ(raised->queue_position(), 1);  // at once: no pass needed
  EXPECT_EQ(h.Get("job-000001").queue_position(), 2);
  EXPECT_THAT(Events(h, "job-000003"), HasSubstr("priority 0 -> 7 (set by alice)"));
  // The spec's rules, its range among them.
  absl::StatusOr<Job> out_of_range = h.m().SetJobPriority("job-000003", 500);
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out_of_range.status().message(), HasSubstr("priority=500 must be in [-100, 100]"));
  EXPECT_EQ(h.m().SetJobPriority("job-3", 5).status().code(), absl::StatusCode::kNotFound);
  // Kept with the spec: a restarted coordinator orders the queue by it.
  h.Open();
  EXPECT_EQ(h.Get("job-000003").spec().priority(), 7);
  EXPECT_EQ(h.Get("job-000003").queue_position(), 1);
  ASSERT_TRUE(h.m().CancelJob("job-000003", "").ok());
  absl::StatusOr<Job> ended = h.m().SetJobPriority("job-000003", 1);
  EXPECT_EQ(ended.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ended.status().message(),
              HasSubstr("job-000003 already ended CANCELLED: a priority orders only jobs not "
                        "ended"));
}

TEST(Preemption, WithoutPreemptAfterNothingIsPreempted) {
  Harness h(TempDb("preempt-off"), [](JobManager::Options* o) { o->lease = absl::Hours(1); });
  h.RunOn(2, Spec("long", 0));
  ASSERT_TRUE(h.Submit(Spec("urgent", 5)).ok());
  h.Advance(absl::Hours(1));
  h.m().RunSchedulerPass();
  EXPECT_THAT(Events(h, "job-000001"), Not(HasSubstr("preempted")));
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
}

}  // namespace
}  // namespace dtrain::coordinator
