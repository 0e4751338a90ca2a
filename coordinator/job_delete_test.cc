// Deleting ended jobs (JobManager::DeleteJob, --ended_job_retention) and the removal of their
// directories through the heartbeats of the workers on their host.
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/job_manager_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kDir[] = "/ckpt/job-000001";

// Runs job-000001 on w1 (rank 0) to SUCCEEDED with its directory at kDir on host "host".
void RunToSuccess(Harness& h) {
  h.RunOn(1, kTinySpec);
  ReportProgressRequest at;
  at.set_worker_id("w1");
  at.set_session_id("s-w1");
  at.set_job_id("job-000001");
  at.mutable_location()->set_dir(kDir);
  at.mutable_location()->set_host("host");
  ASSERT_TRUE(h.m().ReportProgress(at).ok());
  ASSERT_TRUE(h.Sealed("job-000001", 3, absl::StrCat(kDir, "/step_00000003")).ok());
  ASSERT_TRUE(h.Step("w1", "s-w1", "job-000001", 3, 2.5).ok());
  ASSERT_TRUE(
      h.Outcome("w1", "s-w1", "job-000001", true, absl::StrCat(kDir, "/model.safetensors")).ok());
  ASSERT_EQ(h.Get("job-000001").state(), SUCCEEDED);
}

DeleteJobRequest Delete(const std::string& id, bool files) {
  DeleteJobRequest r;
  r.set_job_id(id);
  r.set_files(files);
  return r;
}

HeartbeatResponse Answer(Harness& h, const std::string& worker, DirRemovalState state,
                         int64_t bytes = 0) {
  HeartbeatRequest r;
  r.set_worker_id(worker);
  r.set_session_id("s-" + worker);
  JobDirRemoved* done = r.add_dirs_removed();
  done->set_job_id("job-000001");
  done->set_dir(kDir);
  done->set_state(state);
  done->set_bytes(bytes);
  done->set_worker_id(worker);
  done->set_host("host");
  absl::StatusOr<HeartbeatResponse> response = h.m().Heartbeat(r);
  EXPECT_TRUE(response.ok()) << response.status();
  return response.ok() ? *response : HeartbeatResponse();
}

TEST(DeleteJob, TheRecordsGoAtOnceAndRankZerosWorkerRemovesTheDirectory) {
  Harness h(TempDb("delete-files"));
  RunToSuccess(h);
  const std::string uid = h.Get("job-000001").uid();
  // No worker answers within the call's time (a deadline now): the removal is pending, naming
  // who was asked.
  absl::StatusOr<DeleteJobResponse> deleted =
      h.m().DeleteJob(Delete("job-000001", true), absl::Now());
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->job().state(), SUCCEEDED);
  EXPECT_EQ(deleted->files().state(), DIR_REMOVAL_PENDING);
  EXPECT_EQ(deleted->files().dir(), kDir);
  EXPECT_EQ(deleted->files().worker_id(), "w1");
  EXPECT_EQ(h.m().GetJob("job-000001").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(h.m().ListCheckpoints("job-000001").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(h.m().ListJobs({})->jobs(), IsEmpty());
  EXPECT_THAT(h.Log(), HasSubstr("job-000001: deleted (dtrain delete; it was SUCCEEDED); its "
                                 "directory /ckpt/job-000001 on host goes next (worker w1)"));
  // A second worker on the host does not get it while w1 is live; w1 does, once.
  ASSERT_TRUE(h.Register("w2", "s-w2").ok());
  EXPECT_THAT(h.Beat("w2", "s-w2").remove_dirs(), IsEmpty());
  HeartbeatResponse first = h.Beat("w1", "s-w1");
  ASSERT_THAT(first.remove_dirs(), SizeIs(1));
  EXPECT_EQ(first.remove_dirs(0).job_id(), "job-000001");
  EXPECT_EQ(first.remove_dirs(0).job_uid(), uid);
  EXPECT_EQ(first.remove_dirs(0).dir(), kDir);
  EXPECT_THAT(h.Beat("w1", "s-w1").remove_dirs(), IsEmpty());  // not again before its answer
  // A restart before the answer forgets nothing: the removal is asked again.
  h.Open();
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  EXPECT_THAT(h.Beat("w1", "s-w1").remove_dirs(), SizeIs(1));
  EXPECT_THAT(Answer(h, "w1", DIR_REMOVED, 4096).remove_dirs(), IsEmpty());
  EXPECT_THAT(h.Log(), HasSubstr("job-000001 (deleted): removed /ckpt/job-000001 on host "
                                 "(4.0 KiB, worker w1)"));
  // Answered: gone from the store too, so another restart asks nobody.
  h.Open();
  ASSERT_TRUE(h.Register("w1", "s-w1").ok());
  h.Advance(absl::Minutes(1));
  EXPECT_THAT(h.Beat("w1", "s-w1").remove_dirs(), IsEmpty());
  // The ids go on from where they were.
  absl::StatusOr<Job> next = h.Submit();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->id(), "job-000002");
}

TEST(DeleteJob, WithoutFilesTheDirectoryStays) {
  Harness h(TempDb("delete-records"));
  RunToSuccess(h);
  absl::StatusOr<DeleteJobResponse> deleted =
      h.m().DeleteJob(Delete("job-000001", false), absl::Now());
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_FALSE(deleted->has_files());
  EXPECT_THAT(h.Log(), HasSubstr("its directory /ckpt/job-000001 on host stays"));
  h.Advance(absl::Minutes(1));
  EXPECT_THAT(h.Beat("w1", "s-w1").remove_dirs(), IsEmpty());
}

TEST(DeleteJob, TheWorkerAnsweringInTimeIsTheAnswer) {
  Harness h(TempDb("delete-wait"));
  RunToSuccess(h);
  std::thread worker([&] {
    for (int i = 0; i < 200; ++i) {
      if (h.Beat("w1", "s-w1").remove_dirs_size() > 0) {
        Answer(h, "w1", DIR_REMOVED, 432'328'704);
        return;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  absl::StatusOr<DeleteJobResponse> deleted =
      h.m().DeleteJob(Delete("job-000001", true), absl::Now() + absl::Seconds(10));
  worker.join();
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->files().state(), DIR_REMOVED);
  EXPECT_EQ(deleted->files().bytes(), 432'328'704);
  EXPECT_EQ(plan::DescribeDirRemoval(deleted->files()),
            "removed /ckpt/job-000001 on host (412.3 MiB, worker w1)");
}

TEST(DeleteJob, AnotherWorkerOnTheHostTakesItOverWhenRankZerosIsLost) {
  Harness h(TempDb("delete-other-worker"));
  RunToSuccess(h);
  ASSERT_TRUE(h.m().DeleteJob(Delete("job-000001", true), absl::Now()).ok());
  h.Advance(kLease + absl::Seconds(1));  // w1 stopped heartbeating: lost
  ASSERT_TRUE(h.Register("w2", "s-w2").ok());
  h.m().RunSchedulerPass();
  HeartbeatResponse hb = h.Beat("w2", "s-w2");
  ASSERT_THAT(hb.remove_dirs(), SizeIs(1));
  // Its refusal is an answer too: logged, and not asked again.
  Answer(h, "w2", DIR_REMOVAL_FAILED);
  EXPECT_THAT(h.Log(), HasSubstr("job-000001 (deleted): worker w2 did not remove "
                                 "/ckpt/job-000001 on host"));
  h.Advance(absl::Minutes(1));
  EXPECT_THAT(h.Beat("w2", "s-w2").remove_dirs(), IsEmpty());
}

TEST(DeleteJob, ForgettingTheLastWorkerOfItsHostEndsTheRemovalLeftForTheOperator) {
  Harness h(TempDb("delete-forget-host"));
  RunToSuccess(h);
  ASSERT_TRUE(h.Register("w2", "s-w2").ok());  // a second worker of "host"
  ASSERT_TRUE(h.m().DeleteJob(Delete("job-000001", true), absl::Now()).ok());
  h.Advance(kLease + absl::Seconds(1));  // the host is gone: both lost
  h.m().RunSchedulerPass();
  absl::StatusOr<ForgetWorkerResponse> first = h.m().ForgetWorker("w1");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(first->abandoned(), IsEmpty());  // w2 of that host is still registered
  EXPECT_THAT(*h.m().store().PendingDirRemovals(), SizeIs(1));
  absl::StatusOr<ForgetWorkerResponse> last = h.m().ForgetWorker("w2");
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_THAT(last->abandoned(), SizeIs(1));
  EXPECT_EQ(last->abandoned(0).state(), DIR_REMOVAL_ABANDONED);
  EXPECT_EQ(last->abandoned(0).dir(), kDir);
  EXPECT_THAT(h.Log(), HasSubstr("job-000001 (deleted): /ckpt/job-000001 on host is left in "
                                 "place: no worker of host host is registered any more (its "
                                 "last, w2, was forgotten); remove it there by hand"));
  EXPECT_THAT(*h.m().store().PendingDirRemovals(), IsEmpty());  // nor after a restart
  // A worker of that host registering later is not asked for it.
  ASSERT_TRUE(h.Register("w3", "s-w3").ok());
  h.Advance(absl::Minutes(1));
  h.m().RunSchedulerPass();
  EXPECT_THAT(h.Beat("w3", "s-w3").remove_dirs(), IsEmpty());
}

TEST(DeleteJob, ADirectoryNeverReportedIsResolvedByRankZerosWorker) {
  Harness h(TempDb("delete-unreported"));
  h.RunOn(1, kTinySpec);  // no checkpoint.dir: its rank 0 claims <data_root>/jobs/job-000001
  ASSERT_TRUE(h.Outcome("w1", "s-w1", "job-000001", false, "dataset too small").ok());
  ASSERT_EQ(h.Get("job-000001").state(), FAILED);
  absl::StatusOr<DeleteJobResponse> deleted =
      h.m().DeleteJob(Delete("job-000001", true), absl::Now());
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->files().state(), DIR_REMOVAL_PENDING);
  EXPECT_EQ(deleted->files().dir(), "<its --data_root>/jobs/job-000001");
  HeartbeatResponse hb = h.Beat("w1", "s-w1");
  ASSERT_THAT(hb.remove_dirs(), SizeIs(1));
  EXPECT_EQ(hb.remove_dirs(0).dir(), "");
  EXPECT_EQ(hb.remove_dirs(0).spec_checkpoint_dir(), "");
  Answer(h, "w1", DIR_REMOVED, 72);  // with the directory the worker resolved (kDir here)
  EXPECT_THAT(h.Log(), HasSubstr("job-000001 (deleted): removed /ckpt/job-000001 on host"));
  h.Advance(absl::Minutes(1));
  EXPECT_THAT(h.Beat("w1", "s-w1").remove_dirs(), IsEmpty());
}

TEST(DeleteJob, RefusesWhatIsNotEndedOrStillUsed) {
  Harness h(TempDb("delete-refused"));
  EXPECT_EQ(h.m().DeleteJob(Delete("", true)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.m().DeleteJob(Delete("job-000009", true)).status().code(),
            absl::StatusCode::kNotFound);
  h.RunOn(1, kTinySpec);
  ASSERT_TRUE(h.Sealed("job-000001", 2, absl::StrCat(kDir, "/step_00000002")).ok());
  const absl::Status running = h.m().DeleteJob(Delete("job-000001", true)).status();
  EXPECT_EQ(running.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(running.message(),
            "job-000001 is RUNNING: cancel it first (`dtrain cancel job-000001`), then delete it");
  ASSERT_TRUE(h.m().CancelJob("job-000001", "").ok());
  // A queued job resumes from its checkpoint: deleting it would fail that job.
  SubmitJobRequest resume;
  resume.set_spec_json(
      R"({"dataset": "/d", "batch_size": 4, "resume_from": "job-000001", "steps": 5, )"
      R"("model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 2, "n_embd": 32}})");
  ASSERT_TRUE(h.m().SubmitJob(resume).ok());
  const absl::Status used = h.m().DeleteJob(Delete("job-000001", true)).status();
  EXPECT_EQ(used.code(), absl::StatusCode::kFailedPrecondition) << used;
  EXPECT_THAT(used.message(), HasSubstr("job-000002 (QUEUED) resumes from "
                                        "/ckpt/job-000001/step_00000002, in job-000001's "
                                        "directory: delete job-000001 once job-000002 has ended"));
  ASSERT_TRUE(h.m().CancelJob("job-000002", "").ok());
  EXPECT_TRUE(h.m().DeleteJob(Delete("job-000001", false), absl::Now()).ok());
}

TEST(DeleteJob, TheRetentionDeletesJobsThatEndedLongerAgo) {
  Harness h(TempDb("delete-retention"),
            [](JobManager::Options* o) { o->ended_job_retention = absl::Hours(1); });
  RunToSuccess(h);
  h.Advance(absl::Minutes(59));
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.Get("job-000001").state(), SUCCEEDED);
  h.Advance(absl::Minutes(2));
  h.m().RunSchedulerPass();
  EXPECT_EQ(h.m().GetJob("job-000001").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(h.Log(), HasSubstr("job-000001: deleted (ended more than --ended_job_retention "
                                 "(1h) ago; it was SUCCEEDED); its directory /ckpt/job-000001"));
  // w1 was lost meanwhile (no heartbeats for an hour); back, it gets the removal.
  ASSERT_TRUE(h.Register("w1", "s-w1b").ok());
  EXPECT_THAT(h.Beat("w1", "s-w1b").remove_dirs(), SizeIs(1));
}

}  // namespace
}  // namespace dtrain::coordinator
