#include "coordinator/job_manager.h"

#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_limits.h"
#include "coordinator/job_manager_harness.h"
#include "coordinator/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

constexpr const char* kSpec = kTinySpec;

TEST(JobManager, BadSpecListsEveryProblem) {
  Harness h(TempDb("bad-spec"));
  absl::StatusOr<Job> job = h.Submit(R"({"steps": 0, "parallel": {"tp": 3},
      "model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 4, "n_embd": 32}})");
  ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              AllOf(HasSubstr("steps=0 must be positive"), HasSubstr("dataset is required"),
                    HasSubstr("batch_size=0 must be positive"),
                    HasSubstr("parallel.tp=3 does not divide model.n_head=4")));
  EXPECT_EQ(h.Submit("{nope").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.Submit(R"({"stepz": 1})").status().code(), absl::StatusCode::kInvalidArgument);
  SubmitJobRequest neither;
  EXPECT_EQ(h.m().SubmitJob(neither).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobManager, JobRunsFromQueuedToSucceeded) {
  Harness h(TempDb("happy"));
  absl::StatusOr<Job> job = h.Submit();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id(), "job-000001");
  EXPECT_EQ(job->state(), QUEUED);
  EXPECT_EQ(job->reason(), "waiting for 1 idle worker; 0 idle, 0 busy, 0 lost");
  EXPECT_EQ(job->spec().parallel().schedule(), "1f1b");  // stored defaulted

  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), PLACING);
  HeartbeatResponse hb = h.Beat("w1", "s-w1");
  ASSERT_TRUE(hb.has_assignment());
  EXPECT_EQ(hb.assignment().rank().worker_id(), "w1");
  EXPECT_EQ(hb.assignment().rank().num_layers(), 2);
  EXPECT_EQ(hb.assignment().spec().seed(), 1337u);
  h.Beat("w1", "s-w1", "job-000001");
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);

  for (int step = 1; step <= 3; ++step) {
    absl::StatusOr<ReportProgressResponse> r = h.Step("w1", "s-w1", "job-000001", step, 5.0 - step);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->cancelled());
  }
  ASSERT_TRUE(
      h.Outcome("w1", "s-w1", "job-000001", true, "/runs/job-000001/model.safetensors").ok());
  Job done = h.Get("job-000001");
  EXPECT_EQ(done.state(), SUCCEEDED);
  EXPECT_EQ(done.reason(), "finished 3 steps; weights at /runs/job-000001/model.safetensors");
  EXPECT_EQ(done.output(), "/runs/job-000001/model.safetensors");
  EXPECT_EQ(done.latest().step(), 3);
  EXPECT_THAT(States(done), ElementsAre(QUEUED, PLACING, RUNNING, SUCCEEDED));
  EXPECT_EQ(h.m().store().MetricsAfter("job-000001", 0)->size(), 3u);
  // Idle once its heartbeat no longer names the job (it left the job).
  EXPECT_EQ(h.m().ListWorkers().workers(0).state(), BUSY);
  h.Beat("w1", "s-w1");
  EXPECT_EQ(h.m().ListWorkers().workers(0).state(), IDLE);
}

// A job of `dp` workers named `name`.
std::string DpSpec(int dp, const std::string& name) {
  return absl::StrCat(R"({"parallel": {"dp": )", dp, R"(}, "name": ")", name,
                      R"(", )"
                      R"("checkpoint": {"dir": "/c"}, "dataset": "/d", "steps": 1, )"
                      R"("batch_size": 4, "model": {"vocab_size": 256, "context": 32, )"
                      R"("n_layer": 2, "n_head": 2, "n_embd": 32}})");
}

TEST(JobManager, ALargeJobThatWaitedPastTheReservationIsNotStarvedBySmallOnes) {
  Harness h(TempDb("reservation"),
            [](JobManager::Options* o) { o->queue_reservation = absl::Seconds(3); });
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Register("w2", "s-w2").ok());
  ASSERT_TRUE(h.Submit(DpSpec(4, "big")).ok());  // job-000001: 4 workers, 2 registered
  h.Advance(absl::Seconds(4));
  h.Beat("w1", "s-w1");
  h.Beat("w2", "s-w2");
  h.m().RunSchedulerPass();
  // Too few workers exist to run it: it holds back nobody, however long it waited.
  ASSERT_TRUE(h.Submit(DpSpec(2, "small-1")).ok());  // job-000002
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000002").state(), PLACING);
  // Now 4 live workers (2 busy with job-000002): the big job could run, and has waited past
  // the reservation: the next small job waits behind it instead of taking the 2 idle workers.
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());
  ASSERT_TRUE(h.Register("w4", "s-w4").ok());
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), QUEUED);
  absl::StatusOr<Job> submitted = h.Submit(DpSpec(2, "small-2"));  // job-000003
  ASSERT_TRUE(submitted.ok());
  EXPECT_THAT(submitted->reason(), HasSubstr("waiting behind job-000001"));  // not "placing"
  h.m().RunSchedulerPass();
  Job behind = h.Get("job-000003");
  EXPECT_EQ(behind.state(), QUEUED);
  EXPECT_EQ(behind.reason(),
            "waiting behind job-000001, queued for 4 workers for longer than "
            "--queue_reservation (3s): the workers freed go to it first");
  // The stored reason does not change with time (each change is a write and a log line, every
  // pass, for every job behind).
  h.Advance(absl::Seconds(2));
  h.Beat("w1", "s-w1", "job-000002");
  h.Beat("w2", "s-w2", "job-000002");
  h.Beat("w3", "s-w3");
  h.Beat("w4", "s-w4");
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000003").reason(), behind.reason());
  // A job behind that the idle workers could not run anyway says what it waits for.
  absl::StatusOr<Job> large = h.Submit(DpSpec(4, "four"));  // job-000004: 2 idle
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(large->reason(), "waiting for 4 idle workers; 2 idle, 2 busy, 0 lost");
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000004").reason(), "waiting for 4 idle workers; 2 idle, 2 busy, 0 lost");
}

TEST(JobManager, WithoutAReservationSmallJobsPassALargeOne) {
  Harness h(TempDb("no-reservation"),
            [](JobManager::Options* o) { o->queue_reservation = absl::ZeroDuration(); });
  for (const char* w : {"w1", "w2", "w3", "w4"}) {
    ASSERT_TRUE(h.Register(w, absl::StrCat("s-", w)).ok());
  }
  ASSERT_TRUE(h.Submit(DpSpec(2, "first")).ok());
  h.m().RunSchedulerPass();
  ASSERT_TRUE(h.Submit(DpSpec(4, "big")).ok());
  h.Advance(absl::Seconds(5));
  ASSERT_TRUE(h.Submit(DpSpec(2, "small")).ok());
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000002").state(), QUEUED);
  EXPECT_EQ(h.Get("job-000003").state(), PLACING);
}

TEST(JobManager, AQueuedJobKnowsItsPlaceInTheQueueOfItsKindOfWorkers) {
  Harness h(TempDb("queue-position"));
  auto submit = [&h](const std::string& device) {
    SubmitJobRequest r;
    r.set_spec_json(absl::StrCat(R"({"device": ")", device, R"(", "dataset": "/d", "steps": 1, )",
                                 R"("batch_size": 2, "model": {"vocab_size": 256, "context": 32, )",
                                 R"("n_layer": 1, "n_head": 2, "n_embd": 32}})"));
    return h.m().SubmitJob(r);
  };
  // job-000004 waits for other workers than the cpu jobs, in a queue of its own.
  for (const char* device : {"cpu", "cpu", "cpu", "cuda"}) ASSERT_TRUE(submit(device).ok());
  absl::StatusOr<SubmitJobResponse> submitted = submit("cpu");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->job().queue_position(), 4);  // the submit line says it too
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").queue_position(), 1);
  EXPECT_EQ(h.Get("job-000003").queue_position(), 3);
  EXPECT_EQ(h.Get("job-000004").queue_position(), 1);
  EXPECT_EQ(h.Get("job-000005").queue_position(), 4);
  ASSERT_TRUE(h.m().CancelJob("job-000002", "not needed").ok());
  RegisterWorkerRequest cpu_worker;
  cpu_worker.set_worker_id("w1");
  cpu_worker.set_session_id("s-w1");
  cpu_worker.set_address("w1:7071");
  cpu_worker.mutable_device()->set_kind("cpu");
  ASSERT_TRUE(h.m().RegisterWorker(cpu_worker).ok());
  h.m().RunSchedulerPass();  // job-000001 is placed
  absl::StatusOr<ListJobsResponse> listed = h.m().ListJobs(ListJobsRequest());
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> positions;
  for (const Job& job : listed->jobs()) {
    positions.push_back(absl::StrCat(job.id(), ":", job.queue_position()));
  }
  EXPECT_THAT(positions, ElementsAre("job-000005:2", "job-000004:1", "job-000003:1", "job-000002:0",
                                     "job-000001:0"));
}

TEST(JobManager, AJobOfHigherPriorityGoesFirstInTheQueue) {
  Harness h(TempDb("priority"));
  auto submit = [&h](const std::string& name, int priority) {
    std::string spec = DpSpec(1, name);
    spec.insert(1, absl::StrCat(R"("priority": )", priority, ", "));
    return h.Submit(spec);
  };
  ASSERT_TRUE(submit("a", 0).ok());                   // job-000001
  ASSERT_TRUE(submit("b", 0).ok());                   // job-000002
  absl::StatusOr<Job> urgent = submit("urgent", 10);  // job-000003
  ASSERT_TRUE(urgent.ok()) << urgent.status();
  EXPECT_EQ(urgent->queue_position(), 1);  // ahead of both
  EXPECT_EQ(h.Get("job-000001").queue_position(), 2);
  ASSERT_TRUE(submit("later", -5).ok());  // job-000004: after everything
  EXPECT_EQ(h.Get("job-000004").queue_position(), 4);
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  h.m().RunSchedulerPass();  // one worker: the urgent job takes it
  EXPECT_EQ(h.Get("job-000003").state(), PLACING);
  EXPECT_EQ(h.Get("job-000001").state(), QUEUED);
  EXPECT_EQ(h.Get("job-000001").queue_position(), 1);
}

TEST(JobManager, OfTwoOwnersTheOneHoldingFewerWorkersGoesFirst) {
  Harness h(TempDb("fair-share"));
  for (const char* w : {"w1", "w2"}) ASSERT_TRUE(h.Register(w, absl::StrCat("s-", w)).ok());
  // alice's burst: two jobs take both workers, two more wait.
  for (const char* name : {"a1", "a2", "a3", "a4"}) {
    ASSERT_TRUE(h.Submit(DpSpec(1, name), "alice").ok());  // job-000001 .. job-000004
  }
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000002").state(), PLACING);
  // bob's first job, submitted later, goes ahead of alice's waiting ones: she holds 2 workers,
  // he none. The same order everywhere: his position, hers, and who gets the next worker.
  absl::StatusOr<Job> bobs = h.Submit(DpSpec(1, "b1"), "bob");  // job-000005
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  EXPECT_EQ(bobs->owner(), "bob");
  EXPECT_EQ(bobs->queue_position(), 1);
  EXPECT_EQ(h.Get("job-000003").queue_position(), 2);
  EXPECT_EQ(h.Get("job-000004").queue_position(), 3);
  // A job of a higher priority still goes first, whoever holds what.
  std::string urgent = DpSpec(1, "a5");
  urgent.insert(1, R"("priority": 5, )");
  ASSERT_TRUE(h.Submit(urgent, "alice").ok());  // job-000006
  EXPECT_EQ(h.Get("job-000006").queue_position(), 1);
  EXPECT_EQ(h.Get("job-000005").queue_position(), 2);
  ASSERT_TRUE(h.m().CancelJob("job-000006", "").ok());
  // alice's first job ends: bob's job takes the worker.
  ASSERT_TRUE(h.m().CancelJob("job-000001", "").ok());
  h.Beat("w1", "s-w1");
  h.Beat("w2", "s-w2", "job-000002");
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000005").state(), PLACING) << h.Get("job-000005").reason();
  EXPECT_EQ(h.Get("job-000003").state(), QUEUED);
  // Now each holds one: alice's waiting jobs go in submission order again.
  EXPECT_EQ(h.Get("job-000003").queue_position(), 1);
  EXPECT_EQ(h.Get("job-000004").queue_position(), 2);
  // Ownerless jobs (insecure, or from before owners) are one owner among the others.
  ASSERT_TRUE(h.Submit(DpSpec(1, "x")).ok());  // job-000007: "" holds nothing
  EXPECT_EQ(h.Get("job-000007").queue_position(), 1);
}

TEST(JobManager, AnOwnerHoldsAtMostItsShareOfTheWorkers) {
  Harness h(TempDb("owner-quota"), [](JobManager::Options* o) { o->max_workers_per_owner = 2; });
  for (const char* w : {"w1", "w2", "w3", "w4"}) {
    ASSERT_TRUE(h.Register(w, absl::StrCat("s-", w)).ok());
  }
  // More than the cap at once: refused, nothing created.
  absl::StatusOr<Job> big = h.Submit(DpSpec(4, "big"), "alice");
  EXPECT_EQ(big.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(big.status().message(),
              HasSubstr("alice's job cannot run here: it needs 4 workers, more than the 2 one "
                        "owner may hold (--max_workers_per_owner)"));
  // alice's second job would pass her share: it waits, saying why, while bob's later one runs.
  ASSERT_TRUE(h.Submit(DpSpec(2, "a1"), "alice").ok());  // job-000001
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), PLACING);
  absl::StatusOr<Job> a2 = h.Submit(DpSpec(1, "a2"), "alice");  // job-000002
  ASSERT_TRUE(a2.ok()) << a2.status();
  const std::string waits =
      "waiting for alice's jobs to free workers: they hold 2 and this one needs 1, more than "
      "the 2 one owner may hold (--max_workers_per_owner)";
  EXPECT_EQ(a2->reason(), waits);
  ASSERT_TRUE(h.Submit(DpSpec(1, "b1"), "bob").ok());  // job-000003
  ASSERT_TRUE(h.Submit(DpSpec(1, "x")).ok());          // job-000004: no owner, no cap
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000002").state(), QUEUED);
  EXPECT_EQ(h.Get("job-000002").reason(), waits);
  EXPECT_EQ(h.Get("job-000003").state(), PLACING);
  EXPECT_EQ(h.Get("job-000004").state(), PLACING);
  // Her first job ends: the second goes at the next pass (once a worker is idle).
  ASSERT_TRUE(h.m().CancelJob("job-000001", "").ok());
  for (const char* w : {"w1", "w2", "w3", "w4"}) h.Beat(w, absl::StrCat("s-", w));
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000002").state(), PLACING) << h.Get("job-000002").reason();
}

TEST(JobManager, JobWaitsForEnoughWorkersAndSaysSo) {
  Harness h(TempDb("waits"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  absl::StatusOr<Job> job = h.Submit(absl::StrCat(
      R"({"parallel": {"dp": 2}, "name": "two", )"
      R"("checkpoint": {"dir": "/c"}, "dataset": "/d", "steps": 1, "batch_size": 2,)",
      R"("model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 2, "n_embd": 32}})"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->reason(), "waiting for 2 idle workers; 1 idle, 0 busy, 0 lost");
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), QUEUED);
  ASSERT_TRUE(h.Register("w2", "s-w2").ok());
  h.m().RunSchedulerPass();
  Job placed = h.Get("job-000001");
  EXPECT_EQ(placed.state(), PLACING);
  EXPECT_EQ(placed.placement().ranks_size(), 2);
  // Both must start before the job runs; steps from the dp=1 rank are not recorded.
  HeartbeatResponse a = h.Beat("w1", "s-w1");
  HeartbeatResponse b = h.Beat("w2", "s-w2");
  ASSERT_TRUE(a.has_assignment() && b.has_assignment());
  h.Beat("w1", "s-w1", "job-000001");
  EXPECT_EQ(h.Get("job-000001").state(), PLACING);
  h.Beat("w2", "s-w2", "job-000001");
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  ASSERT_TRUE(h.Step("w2", "s-w2", "job-000001", 1, 9.0).ok());  // dp=1: ignored
  EXPECT_THAT(*h.m().store().MetricsAfter("job-000001", 0), IsEmpty());
  ASSERT_TRUE(h.Step("w1", "s-w1", "job-000001", 1, 4.0).ok());
  EXPECT_EQ(h.m().store().MetricsAfter("job-000001", 0)->size(), 1u);
  // One rank done is not the job done.
  ASSERT_TRUE(h.Outcome("w1", "s-w1", "job-000001", true, "/out").ok());
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  ASSERT_TRUE(h.Outcome("w2", "s-w2", "job-000001", true, "").ok());
  EXPECT_EQ(h.Get("job-000001").state(), SUCCEEDED);
}

constexpr char kPp3Spec[] =
    R"({"parallel": {"pp": 3}, "checkpoint": {"dir": "/c"}, "dataset": "/d", "steps": 1, )"
    R"("fault_tolerance": {"max_restarts": 0}, )"
    R"("batch_size": 2, "model": {"vocab_size": 256, "context": 32, "n_layer": 3, "n_head": 2, )"
    R"("n_embd": 32}})";

TEST(JobManager, APeerFailureWaitsForTheRootCauseThenNamesTheSilentSuspect) {
  Harness h(TempDb("rank-error-quiet"));
  h.RunOn(3, kPp3Spec);
  h.Advance(absl::Milliseconds(2000));  // w2 hangs; w1 and w3 keep heartbeating
  h.Beat("w1", "s-w1", "job-000001");
  h.Beat("w3", "s-w3", "job-000001");
  ASSERT_TRUE(
      h.Failure("w3", "job-000001", FAILURE_PEER, "receive from rank 1 timed out", {"w2"}).ok());
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);  // within the failure window
  h.Advance(absl::Milliseconds(2600));  // past the window (2.5s here), within the lease (5s)
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), FAILED);
  EXPECT_EQ(job.reason(),
            "worker w2 (dp0 pp1 tp0) stopped answering: its peer w3 lost its connection to it "
            "and it reported no error (process killed, host down, or hung?); its last heartbeat "
            "was 4.6s ago\n  then worker w3 (dp0 pp2 tp0) failed: receive from rank 1 timed out");
}

// A partition between workers stops the steps while every worker heartbeats: the status says
// the run stalled instead of "all 3 workers running", and steps make it say so again.
TEST(JobManager, ARunWithoutAStepForTwoHeartbeatsShowsTheStallInItsStatus) {
  Harness h(TempDb("stall-shown"));
  h.RunOn(3, kPp3Spec);
  ASSERT_TRUE(h.Step("w3", "s-w3", "job-000001", 1, 5.0).ok());
  h.Advance(absl::Milliseconds(1500));  // within two heartbeats (1 s each)
  EXPECT_THAT(h.Get("job-000001").reason(), Not(HasSubstr("stalled")));
  h.Advance(absl::Milliseconds(1000));
  h.Beat("w1", "s-w1", "job-000001");
  const Job stalled = h.Get("job-000001");
  EXPECT_EQ(stalled.state(), RUNNING);
  EXPECT_THAT(stalled.reason(), StartsWith("stalled? no step for 2.5s after step 1 (its workers "
                                           "heartbeat every 1s; `dtrain diagnose job-000001`"));
  ASSERT_TRUE(h.Step("w3", "s-w3", "job-000001", 2, 4.9).ok());
  EXPECT_THAT(h.Get("job-000001").reason(), Not(HasSubstr("stalled")));
}

TEST(JobManager, ALastStepWaitingForDiskSpaceSaysSoInItsStatus) {
  Harness h(TempDb("space-wait"));
  h.RunOn(3, kPp3Spec);
  ASSERT_TRUE(h.Step("w3", "s-w3", "job-000001", 2, 5.0).ok());
  ReportProgressRequest r;
  r.set_worker_id("w1");  // rank 0
  r.set_session_id("s-w1");
  r.set_job_id("job-000001");
  CheckpointWait& wait = *r.mutable_checkpoint_wait();
  wait.set_step(2);
  wait.set_dir("/c/job-000001");
  wait.set_why("rank 2 needs 3.0 MiB, 1.0 MiB free");
  wait.set_until_unix_ms(absl::ToUnixMillis(
      absl::FromCivil(absl::CivilSecond(2026, 11, 28, 4, 12, 5), absl::UTCTimeZone())));
  ASSERT_TRUE(h.m().ReportProgress(r).ok());
  h.Advance(absl::Seconds(3));  // no step: the wait, not "stalled?", is the reason
  Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), RUNNING);
  EXPECT_EQ(job.reason(),
            "waiting for disk space: the checkpoint of step 2, the last, does not fit in "
            "/c/job-000001 (rank 2 needs 3.0 MiB, 1.0 MiB free); it is written again until "
            "2026-11-28 04:12:05 UTC, then the job fails: free space there or `dtrain cancel "
            "job-000001`");
  absl::StatusOr<ListJobsResponse> listed = h.m().ListJobs(ListJobsRequest());
  ASSERT_TRUE(listed.ok() && listed->jobs_size() == 1);
  EXPECT_EQ(listed->jobs(0).reason(), job.reason());  // `dtrain list` and the console too
  wait.set_ended(true);
  ASSERT_TRUE(h.m().ReportProgress(r).ok());
  EXPECT_THAT(h.Get("job-000001").reason(), StartsWith("stalled? no step for 3.0s"));
}

TEST(JobManager, AStoppedWorkerIsTheCauseEvenWhenItsPeersReportFirst) {
  Harness h(TempDb("stopped-first"));
  h.RunOn(3, kPp3Spec);
  ASSERT_TRUE(h.Failure("w1", "job-000001", FAILURE_PEER, "stream to rank 1 broke", {"w2"}).ok());
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  DeregisterWorkerRequest bye;
  bye.set_worker_id("w2");
  bye.set_session_id("s-w2");
  bye.set_reason("worker stopped by SIGTERM");
  bye.set_running_job_id("job-000001");
  bye.set_running_step(20);
  ASSERT_TRUE(h.m().DeregisterWorker(bye).ok());
  const Job job = h.Get("job-000001");
  // At once (the cause is known), and a maintenance restart, even with max_restarts 0.
  EXPECT_EQ(job.state(), RECOVERING);
  EXPECT_EQ(job.reason(),
            "maintenance (not counted against max_restarts): worker w2 (dp0 pp1 tp0) stopped: "
            "worker stopped by SIGTERM after step 20; stopping the other 2 ranks");
  ASSERT_EQ(job.recoveries_size(), 1);
  EXPECT_TRUE(job.recoveries(0).maintenance());
  EXPECT_EQ(job.recoveries(0).cause(),
            "worker w2 (dp0 pp1 tp0) stopped: worker stopped by SIGTERM after step 20\n"
            "  then worker w1 (dp0 pp0 tp0) failed: stream to rank 1 broke");
  // Gone from the registry: not IDLE, nothing placed on it, no LOST later.
  const ListWorkersResponse workers = h.m().ListWorkers();
  for (const WorkerInfo& w : workers.workers()) EXPECT_NE(w.worker_id(), "w2");
  // Its log has the error line of each rank that reported one.
  absl::StatusOr<std::vector<LogEntry>> lines =
      h.m().store().LogsAfter("job-000001", 0, /*rank=*/1);
  ASSERT_TRUE(lines.ok());
  ASSERT_FALSE(lines->empty());
  EXPECT_EQ(lines->back().severity(), LOG_ERROR);
  EXPECT_THAT(lines->back().text(), HasSubstr("stopped by SIGTERM after step 20"));
}

// Options::diagnose_stall_after: a run without a step for 3 s is diagnosed once (with its
// placement and secret, to ask its ranks); the answer goes into the job's events, then into the
// reason of the failure that follows.
TEST(JobManager, AStalledRunIsDiagnosedOnceAndItsRootGoesIntoEventsAndReason) {
  std::vector<std::string> asked;
  std::function<void(std::string)> answer;
  Harness h(TempDb("stall"), [&](JobManager::Options* o) {
    o->diagnose_stall_after = absl::Seconds(3);
    o->diagnose = [&](const Job& job, const ListWorkersResponse& workers,
                      std::function<std::vector<TimedOutRank>()>,
                      std::function<void(std::string)> done) {
      asked.push_back(absl::StrCat(job.id(), ": ", job.placement().ranks_size(), " ranks, ",
                                   job.placement().peer_secret().size(), "-byte secret, ",
                                   workers.workers_size(), " workers"));
      answer = std::move(done);
    };
  });
  h.RunOn(3, kPp3Spec);
  auto beat = [&] {
    for (const char* w : {"w1", "w2", "w3"}) h.Beat(w, absl::StrCat("s-", w), "job-000001");
  };
  h.Advance(absl::Seconds(2));
  beat();
  h.m().RunSchedulerPass();
  EXPECT_TRUE(asked.empty());  // 2 s without a step is not a stall yet
  h.Advance(absl::Seconds(1.5));
  beat();
  h.m().RunSchedulerPass();
  h.m().RunSchedulerPass();
  EXPECT_THAT(asked, ElementsAre("job-000001: 3 ranks, 16-byte secret, 3 workers"));
  ASSERT_TRUE(answer);
  answer(
      "root: rank 1 (w2, dp0 pp1 tp0) is in F of micro-batch 0, step 1, for 3.5 s (compute, "
      "not communication); rank 2 waits on its activation");
  absl::StatusOr<std::vector<LogEntry>> events =
      h.m().store().LogsAfter("job-000001", 0, std::nullopt);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_FALSE(events->empty());
  EXPECT_EQ(events->back().text(),
            "no step for 3s: root: rank 1 (w2, dp0 pp1 tp0) is in F of micro-batch 0, step 1, "
            "for 3.5 s (compute, not communication); rank 2 waits on its activation");
  ASSERT_TRUE(h.Outcome("w2", "s-w2", "job-000001", false, "out of memory").ok());
  const Job job = h.Get("job-000001");
  EXPECT_THAT(job.reason(), HasSubstr("out of memory (diagnosed when it stalled: root: rank 1 "
                                      "(w2, dp0 pp1 tp0) is in F of micro-batch 0"));
}

// What the analysis is told when the answers are in: "rank 0 on 1: <its error>".
std::vector<std::string> TimedOutWords(const std::vector<TimedOutRank>& timed_out) {
  std::vector<std::string> ranks;
  for (const TimedOutRank& t : timed_out) {
    ranks.push_back(absl::StrCat("rank ", t.rank, " on ", absl::StrJoin(t.on, ","), ": ", t.error));
  }
  return ranks;
}

// A rank that reports a communication timeout (FAILURE_PEER, DEADLINE_EXCEEDED) has the run
// diagnosed at once, with no --diagnose_stall_after: the analysis learns which rank timed out on
// whom, and the failure waits for the answer (not past the diagnosis deadline) so the still-live
// ranks are asked before they are stopped; the root goes into the events and the reason.
TEST(JobManager, ACommunicationTimeoutIsDiagnosedBeforeTheRunIsStopped) {
  std::vector<std::string> asked;
  std::function<std::vector<TimedOutRank>()> timed_out_now;
  std::function<void(std::string)> answer;
  Harness h(TempDb("timeout-diagnosis"), [&](JobManager::Options* o) {
    o->failure_window = absl::Milliseconds(500);
    o->diagnose = [&](const Job& job, const ListWorkersResponse&,
                      std::function<std::vector<TimedOutRank>()> timed_out,
                      std::function<void(std::string)> done) {
      asked.push_back(job.id());
      timed_out_now = std::move(timed_out);
      answer = std::move(done);
    };
  });
  auto timed_out = [&] { return TimedOutWords(timed_out_now()); };
  h.RunOn(3, kPp3Spec);
  auto timeout = [&](const std::string& worker, const std::string& suspect) {
    ReportProgressRequest r;
    r.set_worker_id(worker);
    r.set_session_id("s-" + worker);
    r.set_job_id("job-000001");
    r.mutable_outcome()->set_error("receiving gradient: nothing arrived within 4s");
    r.mutable_outcome()->set_kind(FAILURE_PEER);
    r.mutable_outcome()->set_error_code(static_cast<int>(absl::StatusCode::kDeadlineExceeded));
    r.mutable_outcome()->add_suspect_workers(suspect);
    return h.m().ReportProgress(r);
  };
  ASSERT_TRUE(timeout("w1", "w2").ok());
  h.m().RunSchedulerPass();
  EXPECT_THAT(asked, ElementsAre("job-000001"));
  ASSERT_TRUE(timed_out_now);
  EXPECT_THAT(timed_out(),
              ElementsAre("rank 0 on 1: receiving gradient: nothing arrived within 4s"));
  // Another rank times out while the ranks are asked: it is gone by the time they answered,
  // and counts as waiting too, first on the peer its error names first (w2), not on w1, which
  // it blames too (w1 gave up and told it so).
  ReportProgressRequest r;
  r.set_worker_id("w3");
  r.set_session_id("s-w3");
  r.set_job_id("job-000001");
  r.mutable_outcome()->set_error(
      "receiving activation from rank 1 (worker w2 at 127.0.0.1:7072): nothing arrived within "
      "4s; rank 0 (worker w1 at 127.0.0.1:7071) gave up");
  r.mutable_outcome()->set_kind(FAILURE_PEER);
  r.mutable_outcome()->set_error_code(static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  r.mutable_outcome()->add_suspect_workers("w1");
  r.mutable_outcome()->add_suspect_workers("w2");
  ASSERT_TRUE(h.m().ReportProgress(r).ok());
  const std::vector<std::string> now = timed_out();
  ASSERT_EQ(now.size(), 2u);
  EXPECT_EQ(now[0], "rank 0 on 1: receiving gradient: nothing arrived within 4s");
  EXPECT_THAT(now[1], HasSubstr("rank 2 on 1,0: receiving activation from rank 1"));
  h.Advance(absl::Seconds(1));  // past the failure window: waits for the diagnosis
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  ASSERT_TRUE(answer);
  answer(
      "root: rank 1 (w2, dp0 pp1 tp0) is in F of micro-batch 0, step 3, for 4.1 s (compute, "
      "not communication); rank 0 timed out waiting on it");
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), FAILED);
  EXPECT_THAT(job.reason(), HasSubstr(" (diagnosed when rank 0 (w1) timed out: root: rank 1 (w2, "
                                      "dp0 pp1 tp0) is in F of micro-batch 0, step 3"));
  absl::StatusOr<std::vector<LogEntry>> events =
      h.m().store().LogsAfter("job-000001", 0, std::nullopt);
  ASSERT_TRUE(events.ok()) << events.status();
  std::vector<std::string> texts;
  for (const LogEntry& e : *events) texts.push_back(e.text());
  EXPECT_THAT(texts, Contains(HasSubstr("rank 0 (w1) timed out: root: rank 1 (w2, dp0 pp1 tp0) "
                                        "is in F of micro-batch 0")));
  EXPECT_EQ(asked.size(), 1u);  // once per run
}

// A diagnosis that does not answer holds the failure back no longer than its deadline (2 s).
TEST(JobManager, ATimeoutDiagnosisDelaysTheFailureAtMostItsDeadline) {
  int asked = 0;
  std::function<void(std::string)> late;
  Harness h(TempDb("timeout-no-answer"), [&](JobManager::Options* o) {
    o->failure_window = absl::Milliseconds(500);
    o->diagnose = [&](const Job&, const ListWorkersResponse&,
                      std::function<std::vector<TimedOutRank>()>,
                      std::function<void(std::string)> done) {
      ++asked;
      late = std::move(done);
    };
  });
  h.RunOn(3, kPp3Spec);
  ReportProgressRequest r;
  r.set_worker_id("w3");
  r.set_session_id("s-w3");
  r.set_job_id("job-000001");
  r.mutable_outcome()->set_error("receiving activation: nothing arrived within 4s");
  r.mutable_outcome()->set_kind(FAILURE_PEER);
  r.mutable_outcome()->set_error_code(static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  r.mutable_outcome()->add_suspect_workers("w2");
  ASSERT_TRUE(h.m().ReportProgress(r).ok());
  h.m().RunSchedulerPass();
  EXPECT_EQ(asked, 1);
  h.Advance(absl::Seconds(2));
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  h.Advance(absl::Milliseconds(300));
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), FAILED);
  EXPECT_THAT(job.reason(), Not(HasSubstr("diagnosed")));
  ASSERT_TRUE(late);
  late("root: rank 1 (w2, dp0 pp1 tp0) did not answer in 2s");  // too late: the job ended
  EXPECT_EQ(h.Get("job-000001").reason(), job.reason());
}

TEST(JobManager, AWorkerRunningAJobThisDatabaseNeverHadIsToldToStopAndTheLogSaysWhy) {
  Harness h(TempDb("other-db"));  // a fresh database: the coordinator's --db changed
  ASSERT_TRUE(h.Register("w1", "s-w1", "job-000042").ok());
  EXPECT_THAT(h.Log(), HasSubstr("worker w1 registers running job-000042, which this "
                                 "coordinator's database has never had (was --db changed?"));
  EXPECT_THAT(h.Beat("w1", "s-w1", "job-000042").cancel_job_ids(), Contains("job-000042"));
}

TEST(JobManager, ForgetRemovesOnlyLostWorkers) {
  Harness h(TempDb("forget"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  DrainWorkerRequest drain;
  drain.set_worker_id("w1");
  drain.set_drain(true);
  ASSERT_TRUE(h.m().DrainWorker(drain).ok());
  ASSERT_EQ(h.m().store().DrainedWorkers()->size(), 1u);
  EXPECT_EQ(h.m().ForgetWorker("w1").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(h.m().ForgetWorker("nobody").status().code(), absl::StatusCode::kNotFound);
  h.Advance(kLease + absl::Milliseconds(1));
  h.m().RunSchedulerPass();
  ASSERT_EQ(h.m().ListWorkers().workers(0).state(), LOST);
  EXPECT_TRUE(h.m().ForgetWorker("w1").ok());
  EXPECT_EQ(h.m().ListWorkers().workers_size(), 0);
  EXPECT_TRUE(h.m().store().DrainedWorkers()->empty());  // its drain is forgotten with it
}

TEST(JobManager, ACudaJobIsNeverPlacedOnCpuWorkersAndSaysWhatItWaitsFor) {
  Harness h(TempDb("cuda-on-cpu"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());  // a cpu worker
  SubmitJobRequest r;
  r.set_spec_json(R"({"device": "cuda", "dataset": "/d", "steps": 1, "batch_size": 2, )"
                  R"("model": {"vocab_size": 256, "context": 32, "n_layer": 1, "n_head": 2, )"
                  R"("n_embd": 32}})");
  absl::StatusOr<SubmitJobResponse> submitted = h.m().SubmitJob(r);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_THAT(submitted->warnings(),
              ElementsAre("the job needs 1 cuda worker and 0 cuda workers are registered: it "
                          "stays QUEUED until enough register"));
  h.m().RunSchedulerPass();
  const Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), QUEUED);
  EXPECT_THAT(job.reason(), HasSubstr("waiting for 1 idle cuda worker; cuda workers: 0 idle"));
}

TEST(JobManager, SpecPathsOutsideEveryWorkersRootsAreRefusedAtSubmit) {
  Harness h(TempDb("paths"));
  auto spec = [](const std::string& dataset) {
    return absl::StrCat(R"({"dataset": ")", dataset, R"(", "steps": 1, "batch_size": 2, )",
                        R"("model": {"vocab_size": 256, "context": 32, "n_layer": 1, )",
                        R"("n_head": 2, "n_embd": 32}})");
  };
  // No worker yet: only the '..' rule.
  EXPECT_TRUE(h.Submit(spec("/etc/passwd")).ok());
  EXPECT_EQ(h.Submit(spec("../../etc/passwd")).status().code(), absl::StatusCode::kInvalidArgument);
  RegisterWorkerRequest r;
  r.set_worker_id("w1");
  r.set_session_id("s-w1");
  r.add_allowed_roots("/srv/w1");
  r.add_allowed_roots("/datasets");
  ASSERT_TRUE(h.m().RegisterWorker(r).ok());
  EXPECT_THAT(h.m().ListWorkers().workers(0).allowed_roots(), ElementsAre("/srv/w1", "/datasets"));
  const absl::Status refused = h.Submit(spec("/etc/passwd")).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "invalid job spec: dataset /etc/passwd is outside the allowed roots of every "
            "registered worker (w1: /srv/w1, /datasets): set --allowed_paths on the workers to "
            "allow it");
  EXPECT_TRUE(h.Submit(spec("/datasets/tiny.bin")).ok());
  EXPECT_TRUE(h.Submit(spec("data/tiny.bin")).ok());  // relative: the worker resolves it
}

TEST(JobManager, SpecSizeAndJobLimitsAreTheOperatorsCaps) {
  Harness h(TempDb("limits"));
  JobManager::Options options;
  options.max_spec_bytes = 4096;
  options.job_limits.max_steps = 2;
  auto store = JobStore::Open(TempDb("limits2"));
  ASSERT_TRUE(store.ok()) << store.status();
  auto manager = JobManager::Create(std::move(*store), options);
  ASSERT_TRUE(manager.ok()) << manager.status();
  SubmitJobRequest big;
  big.set_spec_json(std::string(kTinySpec) + std::string(5000, ' '));
  const absl::Status too_big = (*manager)->SubmitJob(big).status();
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.message(), HasSubstr("above this coordinator's cap of 4096 "
                                           "(--max_spec_bytes)"));
  SubmitJobRequest steps;
  steps.set_spec_json(kTinySpec);  // 3 steps
  const absl::Status too_long = (*manager)->SubmitJob(steps).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(too_long.message(),
            "invalid job spec: steps=3 exceeds this coordinator's cap of 2 "
            "(--max_job_steps)");
  EXPECT_TRUE(h.Submit().ok());  // the defaults let it through
}

TEST(JobManager, ResumeFromAJobIdIsItsLatestSealedCheckpoint) {
  Harness h(TempDb("resume-job-id"));
  h.RunOn(1, kSpec);
  for (int step : {10, 20}) {
    ASSERT_TRUE(
        h.Sealed("job-000001", step, absl::StrCat("/ckpt/job-000001/step_000000", step)).ok());
  }
  auto resume = [&](int steps, const std::string& from = "job-000001") {
    const std::string json = absl::StrCat(
        R"({"dataset": "/d", "batch_size": 4, "resume_from": ")", from, R"(", "steps": )", steps,
        R"(, "model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 2, )"
        R"("n_embd": 32}})");
    SubmitJobRequest req;
    req.set_spec_json(json);
    return h.m().SubmitJob(req);
  };
  // While job-000001 runs, its checkpoints still change: no resume from it yet.
  absl::StatusOr<SubmitJobResponse> early = resume(30);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(early.status().message(),
              HasSubstr("job-000001 is RUNNING: resume it once it has ended "
                        "(`dtrain cancel job-000001` ends it now)"));
  ASSERT_TRUE(h.m().CancelJob("job-000001", "").ok());
  absl::StatusOr<SubmitJobResponse> low = resume(20);
  EXPECT_EQ(low.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(low.status().message(), HasSubstr("steps=20 is not beyond step 20 of job-000001"));
  absl::StatusOr<SubmitJobResponse> ok = resume(30);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->job().spec().resume_from(), "/ckpt/job-000001/step_00000020");
  // An id has one spelling; another is named as what it was meant to be.
  absl::StatusOr<SubmitJobResponse> spelled = resume(30, "job-1");
  EXPECT_EQ(spelled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spelled.status().message(),
              HasSubstr("resume_from=\"job-1\": there is no such job (job ids are written "
                        "job-000001)"));
  EXPECT_EQ(resume(30).ok(), true);
  absl::StatusOr<ListCheckpointsResponse> listed = h.m().ListCheckpoints("job-000001");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->checkpoints_size(), 2);
  EXPECT_EQ(listed->status().last_sealed_step(), 20);
  ListJobsRequest queued;
  queued.add_states(QUEUED);
  EXPECT_THAT(h.m().ListJobs(queued)->jobs(), testing::SizeIs(2));
}

TEST(JobManager, StepsThatRetentionRemovedAreForgotten) {
  Harness h(TempDb("retention-forgotten"));
  h.RunOn(1, kSpec);
  // An earlier run's step on another host's disk is not in this directory's listing.
  ASSERT_TRUE(h.Sealed("job-000001", 5, "/elsewhere/job-000001/step_00000005").ok());
  for (int step : {10, 20, 30}) {
    // keep_last 2: the seal of step 30 removed step 10.
    std::vector<int64_t> kept;
    for (int k : {10, 20, 30}) {
      if (k <= step && k > step - 20) kept.push_back(k);
    }
    ASSERT_TRUE(
        h.Sealed("job-000001", step, absl::StrCat("/ckpt/job-000001/step_000000", step), kept)
            .ok());
  }
  absl::StatusOr<ListCheckpointsResponse> listed = h.m().ListCheckpoints("job-000001");
  ASSERT_TRUE(listed.ok());
  std::vector<int64_t> steps;
  for (const CheckpointInfo& c : listed->checkpoints()) steps.push_back(c.step());
  EXPECT_THAT(steps, testing::ElementsAre(5, 20, 30));
  EXPECT_EQ(listed->status().last_sealed_step(), 30);
}

TEST(JobManager, ARankErrorFailsTheJobAndStopsTheOthers) {
  Harness h(TempDb("rank-error"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Register("w2", "s-w2").ok());
  ASSERT_TRUE(
      h.Submit(absl::StrCat(
                   R"({"parallel": {"pp": 2}, )"
                   R"("checkpoint": {"dir": "/c"}, "dataset": "/d", "steps": 1, "batch_size": 2,)",
                   R"("model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 2,)",
                   R"("n_embd": 32}})"))
          .ok());
  h.m().RunSchedulerPass();
  h.Beat("w1", "s-w1");
  h.Beat("w2", "s-w2");
  h.Beat("w1", "s-w1", "job-000001");
  h.Beat("w2", "s-w2", "job-000001");
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  ASSERT_TRUE(h.Outcome("w2", "s-w2", "job-000001", false, "cannot read /d: no such file").ok());
  Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), FAILED);
  EXPECT_EQ(job.reason(), "worker w2 (dp0 pp1 tp0) failed: cannot read /d: no such file");
  EXPECT_THAT(h.Beat("w1", "s-w1", "job-000001").cancel_job_ids(), ElementsAre("job-000001"));
  absl::StatusOr<ReportProgressResponse> late = h.Step("w1", "s-w1", "job-000001", 2, 1.0);
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->cancelled());
}

TEST(JobManager, LostWorkerFailsItsJobNamingTheWorker) {
  Harness h(TempDb("lost"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.StartOn("w1", "job-000001");
  ASSERT_EQ(h.Get("job-000001").state(), RUNNING);
  h.Advance(kLease + absl::Milliseconds(500));
  h.m().RunSchedulerPass();
  Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), FAILED);
  EXPECT_EQ(job.reason(), "worker w1 (dp0 pp0 tp0) lost: no heartbeat for 5.5s");
  EXPECT_EQ(h.m().ListWorkers().workers(0).state(), LOST);
  EXPECT_THAT(h.Log(), HasSubstr("worker w1 lost"));
  // It comes back: told to register again, then to stop the failed job.
  EXPECT_TRUE(h.Beat("w1", "s-w1", "job-000001").register_again());
  ASSERT_TRUE(h.Register("w1", "s-w1", "job-000001").ok());
  EXPECT_THAT(h.Beat("w1", "s-w1", "job-000001").cancel_job_ids(), ElementsAre("job-000001"));
}

TEST(JobManager, DuplicateWorkerIdIsRejected) {
  Harness h(TempDb("dup"));
  ASSERT_TRUE(h.Register("w1", "s1").ok());
  absl::Status dup = h.Register("w1", "s2");
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(dup.message(), HasSubstr("w1"));
}

TEST(JobManager, CancelQueuedAndRunningJobs) {
  Harness h(TempDb("cancel"));
  ASSERT_TRUE(h.Submit().ok());
  absl::StatusOr<Job> cancelled = h.m().CancelJob("job-000001", "");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), CANCELLED);
  EXPECT_EQ(cancelled->reason(), "cancelled by user");
  absl::StatusOr<Job> again = h.m().CancelJob("job-000001", "");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("already ended CANCELLED"));
  EXPECT_EQ(h.m().CancelJob("job-000077", "").status().code(), absl::StatusCode::kNotFound);
  // Another spelling of an id names no job: the service authorizes a call by the id as stored
  // (the job's owner), so "job-2" must not reach job-000002 past it.
  ASSERT_TRUE(h.Submit().ok());  // job-000002
  for (const char* other : {"job-2", "job-0000002", "job-+2"}) {
    EXPECT_EQ(h.m().CancelJob(other, "").status().code(), absl::StatusCode::kNotFound) << other;
  }
  EXPECT_EQ(h.Get("job-000002").state(), QUEUED);
  ASSERT_TRUE(h.m().CancelJob("job-000002", "").ok());

  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.StartOn("w1", "job-000003");
  ASSERT_TRUE(h.m().CancelJob("job-000003", "wrong learning rate").ok());
  EXPECT_EQ(h.Get("job-000003").reason(), "cancelled: wrong learning rate");
  EXPECT_THAT(h.Beat("w1", "s-w1", "job-000003").cancel_job_ids(), ElementsAre("job-000003"));
  absl::StatusOr<ReportProgressResponse> r = h.Step("w1", "s-w1", "job-000003", 1, 1.0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->cancelled());
  // The worker stops; it is idle again and takes the next job.
  h.Beat("w1", "s-w1");
  ASSERT_TRUE(h.Submit().ok());
  h.StartOn("w1", "job-000004");
  EXPECT_EQ(h.Get("job-000004").state(), RUNNING);
  // Who cancelled is recorded when known (the caller's certificate name).
  ASSERT_TRUE(h.m().CancelJob("job-000004", "", "alice").ok());
  EXPECT_EQ(h.Get("job-000004").reason(), "cancelled by alice");
  ASSERT_TRUE(h.Submit().ok());
  ASSERT_TRUE(h.m().CancelJob("job-000005", "a typo in the spec", "admin").ok());
  EXPECT_EQ(h.Get("job-000005").reason(), "cancelled by admin: a typo in the spec");
}

TEST(JobManager, ReportsAreChecked) {
  Harness h(TempDb("reports"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Register("w2", "s-w2").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.StartOn("w1", "job-000001");
  EXPECT_EQ(h.Step("w1", "s-w1", "job-000404", 1, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(h.Step("w2", "s-w2", "job-000001", 1, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(h.Step("w1", "wrong-session", "job-000001", 1, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ReportProgressRequest empty;
  empty.set_worker_id("w1");
  empty.set_session_id("s-w1");
  empty.set_job_id("job-000001");
  EXPECT_EQ(h.m().ReportProgress(empty).status().code(), absl::StatusCode::kInvalidArgument);
  ReportProgressRequest event = empty;
  event.set_event("loaded 1000 tokens");
  ASSERT_TRUE(h.m().ReportProgress(event).ok());
  EXPECT_EQ(h.m().store().EventsFor("job-000001")->back().text,
            "worker w1 (dp0 pp0 tp0): loaded 1000 tokens");
}

// A worker catching up after an outage sends its steps in runs (StepRun): recorded whole, in one
// report; a run that breaks the format's rules is refused naming the rule. Events and seals keep
// the time the worker made them, not the time they arrived.
TEST(JobManager, AStepRunIsRecordedWholeAndLateReportsKeepTheWorkersTime) {
  Harness h(TempDb("step_run"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.StartOn("w1", "job-000001");
  ReportProgressRequest run;
  run.set_worker_id("w1");
  run.set_session_id("s-w1");
  run.set_job_id("job-000001");
  for (int i = 1; i <= kMaxStepRun; ++i) {
    StepMetrics* m = run.mutable_steps()->add_steps();
    m->set_step(2 * i);  // thinned by the worker's queue
    m->set_loss(10.0 / i);
  }
  ASSERT_TRUE(h.m().ReportProgress(run).ok());
  absl::StatusOr<std::vector<StepMetrics>> stored =
      h.m().store().MetricsAfter("job-000001", 0, 1 << 20);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), static_cast<size_t>(kMaxStepRun));
  EXPECT_EQ(stored->front().step(), 2);
  EXPECT_EQ(stored->back().step(), 2 * kMaxStepRun);
  EXPECT_EQ(h.Get("job-000001").latest().step(), 2 * kMaxStepRun);

  ReportProgressRequest longer = run;
  longer.mutable_steps()->add_steps()->set_step(2 * kMaxStepRun + 1);
  EXPECT_THAT(h.m().ReportProgress(longer).status().message(),
              HasSubstr("a step run carries 1025 steps; 1 to 1024 are allowed"));
  ReportProgressRequest backwards = run;
  backwards.mutable_steps()->mutable_steps(3)->set_step(1);
  EXPECT_THAT(h.m().ReportProgress(backwards).status().message(),
              HasSubstr("a step run goes from step 6 to step 1: not increasing"));
  ReportProgressRequest empty = run;
  empty.mutable_steps()->clear_steps();
  EXPECT_EQ(h.m().ReportProgress(empty).status().code(), absl::StatusCode::kInvalidArgument);

  const int64_t made_ms = 1600000000000;  // long before the harness's clock
  ReportProgressRequest event = run;
  event.set_event("checkpoint sealed at step 100");
  event.set_time_unix_ms(made_ms);
  ASSERT_TRUE(h.m().ReportProgress(event).ok());
  EXPECT_EQ(h.m().store().EventsFor("job-000001")->back().time_unix_ms, made_ms);
  ReportProgressRequest sealed = run;
  sealed.mutable_checkpoint()->set_step(100);
  sealed.mutable_checkpoint()->set_path("/c/job-000001/step_00000100");
  sealed.set_time_unix_ms(made_ms);
  ASSERT_TRUE(h.m().ReportProgress(sealed).ok());
  absl::StatusOr<std::vector<CheckpointInfo>> seals = h.m().store().Checkpoints("job-000001");
  ASSERT_TRUE(seals.ok());
  ASSERT_EQ(seals->size(), 1u);
  EXPECT_EQ(seals->front().time_unix_ms(), made_ms);
}

// A report of w1 about job-000001, numbered `seq` in `session`; what it carries is the caller's.
ReportProgressRequest NumberedReport(const std::string& session, uint64_t seq) {
  ReportProgressRequest r;
  r.set_worker_id("w1");
  r.set_session_id(session);
  r.set_job_id("job-000001");
  r.set_report_seq(seq);
  return r;
}

// How many lines of job-000001's log contain `text`.
int LinesWith(Harness& h, const std::string& text) {
  absl::StatusOr<std::vector<JobEvent>> events = h.m().store().EventsFor("job-000001");
  int n = 0;
  for (const JobEvent& e : *events) n += absl::StrContains(e.text, text);
  return n;
}

// A report whose answer was lost is sent again by its worker: numbered (report_seq), the copy is
// answered OK and recorded once; a refused report's number is not taken, and unnumbered reports
// (workers before the field) are always recorded. (Sessions: worker_registry_test.)
TEST(JobManager, AReportSentAgainAfterALostAnswerIsRecordedOnce) {
  Harness h(TempDb("report_seq"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.StartOn("w1", "job-000001");
  auto event = [](const std::string& session, uint64_t seq, const std::string& text) {
    ReportProgressRequest r = NumberedReport(session, seq);
    r.set_event(text);
    return r;
  };
  auto lines = [&h](const std::string& text) { return LinesWith(h, text); };
  ASSERT_TRUE(h.m().ReportProgress(event("s-w1", 7, "sealed 100")).ok());
  ASSERT_TRUE(h.m().ReportProgress(event("s-w1", 7, "sealed 100")).ok());  // the copy
  EXPECT_EQ(lines("sealed 100"), 1);
  // A refused report (not recorded) keeps its number free; below the highest is a copy.
  ReportProgressRequest refused = event("s-w1", 8, "");
  refused.clear_event();
  EXPECT_FALSE(h.m().ReportProgress(refused).ok());
  ASSERT_TRUE(h.m().ReportProgress(event("s-w1", 8, "sealed 200")).ok());
  ASSERT_TRUE(h.m().ReportProgress(event("s-w1", 3, "an old copy")).ok());
  EXPECT_EQ(lines("sealed 200"), 1);
  EXPECT_EQ(lines("an old copy"), 0);
  // Unnumbered: every one recorded.
  ASSERT_TRUE(h.m().ReportProgress(event("s-w1", 0, "unnumbered")).ok());
  ASSERT_TRUE(h.m().ReportProgress(event("s-w1", 0, "unnumbered")).ok());
  EXPECT_EQ(lines("unnumbered"), 2);
}

// The answer to a report can be lost with the coordinator itself (killed right after it recorded
// the line): the worker sends the report again to the restarted coordinator, under the same
// session and number, and the line is recorded once; the next report is recorded.
TEST(JobManager, ALineSentAgainAfterACoordinatorRestartIsRecordedOnce) {
  const std::string db = TempDb("report_seq_restart");
  Harness h(db);
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.StartOn("w1", "job-000001");
  auto line = [](uint64_t seq, const std::string& text) {
    ReportProgressRequest r = NumberedReport("s-w1", seq);
    r.mutable_log()->set_text(text);
    return r;
  };
  auto count = [&h](const std::string& text) { return LinesWith(h, text); };
  ASSERT_TRUE(h.m().ReportProgress(line(4, "loaded shard 3")).ok());
  h.Open();  // the coordinator restarts before its answer reached the worker
  ASSERT_TRUE(h.Register("w1", "s-w1", "job-000001").ok());
  ASSERT_TRUE(h.m().ReportProgress(line(4, "loaded shard 3")).ok());  // the copy
  EXPECT_EQ(count("loaded shard 3"), 1);
  ASSERT_TRUE(h.m().ReportProgress(line(5, "loaded shard 4")).ok());
  EXPECT_EQ(count("loaded shard 4"), 1);
}

// A database that turns read-only under a running job (SQLITE_READONLY; here SQLite's
// query_only) is the coordinator's fault: the report is answered UNAVAILABLE, which its worker
// keeps and retries, never FAILED_PRECONDITION, which it would read as "this job is not yours";
// the store counts it as failing writes (the job's status names the database); the report is
// recorded once the database can be written again.
TEST(JobManager, AReportTheDatabaseCannotWriteIsRetriedNotRefused) {
  Harness h(TempDb("readonly"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.StartOn("w1", "job-000001");
  ASSERT_TRUE(h.Step("w1", "s-w1", "job-000001", 1, 5.0).ok());
  ASSERT_TRUE(h.m().store().SetQueryOnlyForTesting(true).ok());
  absl::StatusOr<ReportProgressResponse> refused = h.Step("w1", "s-w1", "job-000001", 2, 4.0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("readonly database"));
  EXPECT_TRUE(h.m().store().FailingWrites().has_value());
  // What a report asks is still answered as before: an unknown job is NOT_FOUND.
  EXPECT_EQ(h.Step("w1", "s-w1", "job-000404", 2, 4.0).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(h.m().store().SetQueryOnlyForTesting(false).ok());
  ASSERT_TRUE(h.Step("w1", "s-w1", "job-000001", 2, 4.0).ok());
  EXPECT_EQ(h.Get("job-000001").latest().step(), 2);
  EXPECT_FALSE(h.m().store().FailingWrites().has_value());
}

TEST(JobManager, UnacceptedAssignmentFailsAfterTheLease) {
  Harness h(TempDb("unaccepted"));
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.m().RunSchedulerPass();
  ASSERT_TRUE(h.Beat("w1", "s-w1").has_assignment());
  for (int i = 0; i < 6; ++i) {
    h.Advance(absl::Seconds(1));
    h.Beat("w1", "s-w1");
    h.m().RunSchedulerPass();
  }
  Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), FAILED);
  EXPECT_EQ(job.reason(), "worker w1 did not accept its assignment within 5.0s");
}

TEST(JobManager, RestartKeepsQueuedJobsAndHistory) {
  const std::string db = TempDb("restart-queued");
  Harness h(db);
  ASSERT_TRUE(h.Submit().ok());
  ASSERT_TRUE(h.Submit().ok());
  ASSERT_TRUE(h.m().CancelJob("job-000002", "").ok());
  h.Open();  // coordinator restart
  Job queued = h.Get("job-000001");
  EXPECT_EQ(queued.state(), QUEUED);
  EXPECT_EQ(h.Get("job-000002").state(), CANCELLED);
  EXPECT_EQ(h.Get("job-000002").history_size(), 2);
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  h.StartOn("w1", "job-000001");
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  // Ids continue after the restart.
  EXPECT_EQ(h.Submit()->id(), "job-000003");
}

TEST(JobManager, RestartReattachesRunningWorkers) {
  const std::string db = TempDb("restart-running");
  Harness h(db);
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.StartOn("w1", "job-000001");
  ASSERT_TRUE(h.Step("w1", "s-w1", "job-000001", 1, 4.0).ok());
  h.Open();  // the coordinator restarts; the worker keeps running
  EXPECT_TRUE(h.Beat("w1", "s-w1", "job-000001").register_again());
  ASSERT_TRUE(h.Register("w1", "s-w1", "job-000001").ok());
  EXPECT_THAT(h.Beat("w1", "s-w1", "job-000001").cancel_job_ids(), IsEmpty());
  for (int i = 0; i < 4; ++i) {  // past the recovery deadline, heartbeating
    h.Advance(absl::Seconds(2));
    h.Beat("w1", "s-w1", "job-000001");
    h.m().RunSchedulerPass();
  }
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  ASSERT_TRUE(h.Step("w1", "s-w1", "job-000001", 2, 3.0).ok());
  ASSERT_TRUE(h.Outcome("w1", "s-w1", "job-000001", true, "/out").ok());
  Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), SUCCEEDED);
  EXPECT_EQ(h.m().store().MetricsAfter("job-000001", 0)->size(), 2u);
  std::vector<std::string> events;
  absl::StatusOr<std::vector<JobEvent>> stored = h.m().store().EventsFor("job-000001");
  ASSERT_TRUE(stored.ok());
  for (const JobEvent& e : *stored) events.push_back(e.text);
  EXPECT_THAT(absl::StrJoin(events, "\n"), HasSubstr("worker w1 re-attached at step 0"));
}

TEST(JobManager, RestartFailsJobsWhoseWorkersDoNotReturn) {
  const std::string db = TempDb("restart-gone");
  Harness h(db);
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.StartOn("w1", "job-000001");
  h.Open();
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
  h.Advance(kLease + absl::Milliseconds(1));
  h.m().RunSchedulerPass();
  Job job = h.Get("job-000001");
  EXPECT_EQ(job.state(), FAILED);
  EXPECT_EQ(job.reason(),
            "coordinator restarted and worker w1 did not return within the lease (5.0s)");
}

TEST(JobManager, RestartResendsAPlacingJobsAssignment) {
  const std::string db = TempDb("restart-placing");
  Harness h(db);
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  h.m().RunSchedulerPass();
  ASSERT_EQ(h.Get("job-000001").state(), PLACING);
  const std::string secret = h.Get("job-000001").placement().peer_secret();
  EXPECT_EQ(secret.size(), 16u);
  h.Open();  // restart before the worker heard of the job
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  HeartbeatResponse hb = h.Beat("w1", "s-w1");
  ASSERT_TRUE(hb.has_assignment());
  // The same run, so the same peer secret (kept in the store with the placement).
  EXPECT_EQ(hb.assignment().placement().peer_secret(), secret);
  h.Beat("w1", "s-w1", "job-000001");
  EXPECT_EQ(h.Get("job-000001").state(), RUNNING);
}

TEST(JobManager, Places512RanksOver1000WorkersQuickly) {
  Harness h(TempDb("big"));
  for (int i = 0; i < 1000; ++i) {
    RegisterWorkerRequest r;
    r.set_worker_id(absl::StrFormat("w%04d", i));
    r.set_session_id("s");
    r.set_host_label(absl::StrFormat("host%03d", i / 8));
    ASSERT_TRUE(h.m().RegisterWorker(r).ok());
  }
  absl::StatusOr<Job> job = h.Submit(absl::StrCat(
      R"({"parallel": {"dp": 8, "pp": 16, "tp": 4}, )"
      R"("checkpoint": {"dir": "/c"}, "dataset": "/d", "steps": 1,)",
      R"("batch_size": 8, "model": {"vocab_size": 50257, "context": 1024, "n_layer": 48,)",
      R"("n_head": 16, "n_embd": 1024}})"));
  ASSERT_TRUE(job.ok()) << job.status();
  const absl::Time start = absl::Now();
  h.m().RunSchedulerPass();
  const absl::Duration took = absl::Now() - start;
  std::printf(
      "scheduler pass placing 512 ranks over 1000 workers (with the SQLite commit): "
      "%.3f ms\n",
      absl::ToDoubleMilliseconds(took));
  Job placed = h.Get(job->id());
  EXPECT_EQ(placed.state(), PLACING);
  EXPECT_EQ(placed.placement().ranks_size(), 512);
  EXPECT_EQ(h.m().ListWorkers().workers_size(), 1000);
  // Heartbeats deliver each rank its own assignment.
  HeartbeatRequest beat;
  beat.set_worker_id(placed.placement().ranks(511).worker_id());
  beat.set_session_id("s");
  absl::StatusOr<HeartbeatResponse> hb = h.m().Heartbeat(beat);
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->assignment().rank().dp_rank(), 7);
  // Its own part of the job (rank_assignment.h), not the 512 ranks: itself and its 7 peers
  // (pp14 and pp0 of its (dp, tp), tp2 = rank 510 and tp0, dp6 and dp0, and rank 0).
  EXPECT_EQ(hb->assignment().placement().ranks_size(), 8);
  EXPECT_EQ(hb->assignment().placement().peer_secret(), placed.placement().peer_secret());
}

// Save first, then publish (job_manager_apply.cc's rule): while the store cannot record
// PLACING, the worker the job is placed on heartbeats every millisecond through the save's 5 s
// busy wait and never receives the assignment; the job stays QUEUED and the worker idle, and
// the next pass places it once the store answers.
TEST(JobManager, APlacementTheStoreCannotRecordIsNeverDeliveredAndIsRetried) {
  const std::string db = TempDb("place-save-first");
  Harness h(db);
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  ASSERT_TRUE(h.Submit().ok());
  sqlite3* other = nullptr;  // holds the write lock: the store's writes fail
  ASSERT_EQ(sqlite3_open(db.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  std::atomic<bool> done{false};
  std::atomic<int> beats{0}, delivered{0};
  std::thread worker([&] {
    while (!done.load()) {
      if (h.Beat("w1", "s-w1").has_assignment()) ++delivered;
      ++beats;
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  h.m().RunSchedulerPass();
  done = true;
  worker.join();
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  EXPECT_GT(beats.load(), 100);  // heartbeats all through the save
  EXPECT_EQ(delivered.load(), 0);
  EXPECT_THAT(h.Log(), HasSubstr("job-000001: placement deferred: "));
  EXPECT_EQ(h.Get("job-000001").state(), QUEUED);
  EXPECT_EQ(h.m().ListWorkers().workers(0).state(), IDLE);
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), PLACING);
  const HeartbeatResponse r = h.Beat("w1", "s-w1");
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().job_id(), "job-000001");
}

}  // namespace
}  // namespace dtrain::coordinator
