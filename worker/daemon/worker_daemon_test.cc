// WorkerDaemon against an in-test coordinator over real gRPC on 127.0.0.1: registration,
// assignments, step reports, cancellation, a coordinator restart, bad jobs, SIGTERM.
#include "worker/daemon/worker_daemon.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/job_paths.h"
#include "common/path_policy.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "worker/daemon/fake_coordinator.h"

namespace dtrain::worker {
namespace {

using ::testing::HasSubstr;

// A worker daemon on its own thread, talking to a FakeCoordinator on a free port.
class WorkerDaemonTest : public ::testing::Test {
 protected:
  void StartWorker(std::function<void(int64_t)> after_step = nullptr) {
    server_ = StartServer(&fake_, &port_);
    ASSERT_NE(server_, nullptr);
    backend_ = kernels::CreateBackend("cpu", 1).value();
    client_ = std::make_unique<CoordinatorClient>(absl::StrCat("127.0.0.1:", port_),
                                                  absl::Seconds(2), absl::Milliseconds(200));
    WorkerOptions options;
    options.worker_id = "w1";
    options.advertise_address = "127.0.0.1:7071";
    options.host_label = "test-host";
    options.data_root = TempPath(::testing::UnitTest::GetInstance()->current_test_info()->name());
    options.allowed_roots = ResolveRoots({::testing::TempDir()}).value();
    options.max_backoff = absl::Milliseconds(200);
    options.shutdown_grace = absl::Seconds(2);
    options.after_step = std::move(after_step);
    options.id_conflict_wait = id_conflict_wait_;
    daemon_ = std::make_unique<WorkerDaemon>(options, client_.get(), backend_.get());
    thread_ = std::thread([this] { run_status_ = daemon_->Run(); });
  }

  void TearDown() override {
    if (daemon_ != nullptr) {
      daemon_->Stop("test finished");
      thread_.join();
    }
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

  // Runs a 12-step job until its step `down_at` was delivered, shuts the coordinator down and
  // lets the job finish (its later steps and its outcome wait in the worker's queue), then
  // serves restarted_ on the same port until the outcome arrives there.
  void FinishWhileCoordinatorDown(const std::string& job_id, int64_t down_at) {
    fake_.Assign(TinyJob(job_id, WriteText(job_id + ".txt", 2000), 12));
    StartWorker([this, down_at](int64_t step) {
      if (step == down_at) {
        reached_.Notify();
        release_.WaitForNotification();  // the coordinator is down
      }
      if (step == 12) finished_.Notify();
    });
    ASSERT_TRUE(reached_.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(fake_.WaitUntil([down_at](FakeCoordinator& f) {
      return static_cast<int64_t>(StepsOf(f.reports_locked()).size()) >= down_at - 1;
    }));
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server_.reset();
    release_.Notify();
    ASSERT_TRUE(finished_.WaitForNotificationWithTimeout(kWait));
    absl::SleepFor(absl::Milliseconds(300));  // the outcome is queued; heartbeats keep failing
    int port = port_;
    server_ = StartServer(&restarted_, &port);
    ASSERT_EQ(port, port_);
    ASSERT_TRUE(restarted_.WaitUntil(HasOutcome));
  }

  // Gates between a test and the training thread's after_step hook. Members, so they outlive
  // the hook (TearDown stops the daemon before the fixture is destroyed).
  absl::Notification reached_, release_, finished_;
  FakeCoordinator fake_;
  FakeCoordinator restarted_;  // the same coordinator after a restart: it knows no session
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<CoordinatorClient> client_;
  std::unique_ptr<WorkerDaemon> daemon_;
  std::thread thread_;
  absl::Status run_status_;
  absl::Duration id_conflict_wait_ = absl::Seconds(15);
};

TEST_F(WorkerDaemonTest, RegistrationCarriesIdentityAndDeviceInfo) {
  StartWorker();
  ASSERT_TRUE(
      fake_.WaitUntil([](FakeCoordinator& f) { return f.heartbeats_locked().size() >= 3; }));
  const RegisterWorkerRequest r = fake_.registrations().at(0);
  EXPECT_EQ(r.worker_id(), "w1");
  EXPECT_EQ(r.session_id(), daemon_->session_id());
  EXPECT_EQ(r.session_id().size(), 16u);
  EXPECT_EQ(r.address(), "127.0.0.1:7071");
  EXPECT_EQ(r.host_label(), "test-host");
  EXPECT_EQ(r.device().kind(), "cpu");
  EXPECT_EQ(r.device().name(), backend_->info().name);
  EXPECT_GT(r.device().memory_bytes(), 0);
  EXPECT_EQ(r.running_job_id(), "");
  const HeartbeatRequest h = fake_.heartbeats().back();
  EXPECT_EQ(h.worker_id(), "w1");
  EXPECT_EQ(h.session_id(), daemon_->session_id());
  EXPECT_EQ(h.running_job_id(), "");
  EXPECT_EQ(fake_.registrations().size(), 1u);
}

TEST_F(WorkerDaemonTest, AssignmentReportsStepsInOrderThenSuccessWithTheWeights) {
  const std::string data = WriteText("success.txt", 2000);
  JobAssignment assignment = TinyJob("job-000001", data, 8);
  assignment.set_attempt(2);  // the job's third run: every report says so
  fake_.Assign(assignment);
  StartWorker();
  ASSERT_TRUE(fake_.WaitUntil(HasOutcome));
  const std::vector<ReportProgressRequest> reports = fake_.reports();
  EXPECT_EQ(StepsOf(reports), Range(1, 8));
  for (const auto& r : reports) {
    EXPECT_EQ(r.worker_id(), "w1");
    EXPECT_EQ(r.session_id(), daemon_->session_id());
    EXPECT_EQ(r.job_id(), "job-000001");
    EXPECT_TRUE(r.has_attempt());
    EXPECT_EQ(r.attempt(), 2);
    if (r.has_step()) {
      EXPECT_GT(r.step().loss(), 0);
      EXPECT_GT(r.step().grad_norm(), 0);
      EXPECT_FLOAT_EQ(r.step().learning_rate(), 1e-2f);
      EXPECT_GT(r.step().tokens_per_s(), 0);
      EXPECT_GT(r.step().time_unix_ms(), 0);
    }
  }
  EXPECT_TRUE(reports.back().has_outcome());  // the outcome comes last
  const JobOutcome outcome = OutcomeOf(reports);
  ASSERT_TRUE(outcome.succeeded()) << outcome.error();
  EXPECT_EQ(outcome.output(), TempPath("AssignmentReportsStepsInOrderThenSuccessWithTheWeights") +
                                  "/jobs/job-000001/model.safetensors");
  struct stat st;
  ASSERT_EQ(stat(outcome.output().c_str(), &st), 0);
  EXPECT_GT(st.st_size, 1000);
  EXPECT_EQ(outcome.output_host(), "test-host");
  // First where the job writes, then its events.
  ASSERT_TRUE(reports.front().has_location());
  EXPECT_EQ(
      reports.front().location().dir(),
      TempPath("AssignmentReportsStepsInOrderThenSuccessWithTheWeights") + "/jobs/job-000001");
  EXPECT_EQ(reports.front().location().host(), "test-host");
  EXPECT_EQ(reports.at(1).event(), "loaded dataset " + data + " (2000 tokens)");

  // The job was acknowledged in heartbeats, and the worker is idle again afterwards.
  ASSERT_TRUE(fake_.WaitUntil([](FakeCoordinator& f) {
    return !f.heartbeats_locked().empty() && f.heartbeats_locked().back().running_job_id().empty();
  }));
  bool acknowledged = false;
  for (const auto& h : fake_.heartbeats()) acknowledged |= h.running_job_id() == "job-000001";
  EXPECT_TRUE(acknowledged);
}

TEST_F(WorkerDaemonTest, CancelInAHeartbeatStopsTheJobWithinAStep) {
  const std::string data = WriteText("cancel.txt", 2000);
  fake_.Assign(TinyJob("job-000002", data, 100000));
  StartWorker([this](int64_t step) {
    if (step != 3) return;
    fake_.Cancel("job-000002");
    // The heartbeat after the one carrying the cancel: by then the daemon has acted on it.
    fake_.WaitUntil([](FakeCoordinator& f) {
      return f.cancel_sent_at_locked() >= 0 &&
             static_cast<int64_t>(f.heartbeats_locked().size()) > f.cancel_sent_at_locked();
    });
  });
  ASSERT_TRUE(fake_.WaitUntil([](FakeCoordinator& f) {
    return f.cancel_sent_at_locked() >= 0 && f.heartbeats_locked().back().running_job_id().empty();
  }));
  const std::vector<ReportProgressRequest> reports = fake_.reports();
  EXPECT_EQ(StepsOf(reports), Range(1, 3));
  EXPECT_FALSE(HasOutcome(fake_)) << "the coordinator decided the end; no outcome is sent";
}

TEST_F(WorkerDaemonTest, CoordinatorRestartReattachesTheJobAndDeliversBufferedSteps) {
  FinishWhileCoordinatorDown("job-000003", 4);
  FakeCoordinator& restarted = restarted_;
  bool reattached = false;
  for (const auto& r : restarted.registrations()) {
    if (r.running_job_id() == "job-000003") {
      reattached = true;
      EXPECT_EQ(r.running_step(), 12);
      EXPECT_EQ(r.session_id(), daemon_->session_id());
    }
  }
  EXPECT_TRUE(reattached);
  std::vector<int64_t> before = StepsOf(fake_.reports());
  std::vector<int64_t> after = StepsOf(restarted.reports());
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.back(), 12);
  EXPECT_TRUE(std::is_sorted(after.begin(), after.end()));
  std::set<int64_t> all(before.begin(), before.end());
  all.insert(after.begin(), after.end());
  EXPECT_EQ(std::vector<int64_t>(all.begin(), all.end()), Range(1, 12));
  // The steps buffered meanwhile went in runs, not one call each.
  int step_reports = 0;
  for (const auto& r : restarted.reports()) step_reports += r.has_step() || r.has_steps();
  EXPECT_LT(step_reports, static_cast<int>(after.size())) << after.size() << " steps";
  EXPECT_TRUE(OutcomeOf(restarted.reports()).succeeded());
}

// A coordinator from before StepRun refuses a run as a report it cannot read: the worker sends
// the same steps one by one, and every step arrives.
TEST_F(WorkerDaemonTest, ACoordinatorThatTakesNoStepRunsGetsEveryStepOneByOne) {
  restarted_.RefuseStepRuns();
  FinishWhileCoordinatorDown("job-000005", 2);
  EXPECT_GE(restarted_.step_runs_refused(), 1);
  std::vector<int64_t> before = StepsOf(fake_.reports());
  const std::vector<int64_t> after = StepsOf(restarted_.reports());
  EXPECT_EQ(std::set<int64_t>(after.begin(), after.end()).size(), after.size()) << "a step twice";
  std::set<int64_t> all(before.begin(), before.end());
  all.insert(after.begin(), after.end());
  EXPECT_EQ(std::vector<int64_t>(all.begin(), all.end()), Range(1, 12));
  for (const auto& r : restarted_.reports()) EXPECT_FALSE(r.has_steps());
  EXPECT_TRUE(OutcomeOf(restarted_.reports()).succeeded());
}

TEST_F(WorkerDaemonTest, MissingDatasetFailsWithTheOutcomeNamingThePath) {
  const std::string missing = TempPath("does/not/exist.bin");
  fake_.Assign(TinyJob("job-000004", missing, 5));
  StartWorker();
  ASSERT_TRUE(fake_.WaitUntil(HasOutcome));
  const JobOutcome outcome = OutcomeOf(fake_.reports());
  EXPECT_FALSE(outcome.succeeded());
  EXPECT_THAT(outcome.error(), HasSubstr("dataset " + missing));
  EXPECT_TRUE(StepsOf(fake_.reports()).empty());
}

TEST_F(WorkerDaemonTest, MultiWorkerJobWithABadPlacementFailsNamingIt) {
  JobAssignment a = TinyJob("job-000005", WriteText("layout.txt", 2000), 5);
  a.mutable_spec()->mutable_parallel()->set_dp(2);
  a.mutable_spec()->mutable_parallel()->set_pp(2);
  fake_.Assign(a);
  StartWorker();
  ASSERT_TRUE(fake_.WaitUntil(HasOutcome));
  const JobOutcome outcome = OutcomeOf(fake_.reports());
  EXPECT_FALSE(outcome.succeeded());
  EXPECT_THAT(outcome.error(), HasSubstr("the placement of job job-000005 (dp=2 pp=2 tp=1) "
                                         "gives no rank to worker w1"));
}

TEST_F(WorkerDaemonTest, AWorkerIdHeldByAnotherLiveSessionEndsRunAfterTheWait) {
  fake_.RefuseRegistrations(grpc::Status(
      grpc::StatusCode::ALREADY_EXISTS,
      "worker id \"w1\" is held by another live session (last heartbeat 0.2s ago, lease 3.0s); "
      "is a second worker running with this --worker_id?"));
  id_conflict_wait_ = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  StartWorker();
  thread_.join();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(run_status_.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(run_status_.message(), HasSubstr("held by another live session"));
  EXPECT_THAT(run_status_.message(), HasSubstr("every worker process needs its own --worker_id"));
  EXPECT_GE(fake_.registrations().size(), 2u);  // retried meanwhile
  daemon_.reset();
}

TEST_F(WorkerDaemonTest, ACertificateWhoseRoleMayNotRegisterEndsRunAtOnce) {
  // No retry cures a certificate of the wrong role (coordinator/roles.h).
  fake_.RefuseRegistrations(grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      "certificate 'viewer' (role viewer) may not call RegisterWorker: it needs role worker"));
  StartWorker();
  thread_.join();
  EXPECT_EQ(run_status_.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(run_status_.message(), HasSubstr("may not call RegisterWorker"));
  EXPECT_EQ(fake_.registrations().size(), 1u);
  daemon_.reset();
}

TEST_F(WorkerDaemonTest, AWorkerIdFreedWithinTheWaitRegisters) {
  fake_.RefuseRegistrations(grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "held"));
  id_conflict_wait_ = absl::Seconds(20);
  StartWorker();
  ASSERT_TRUE(
      fake_.WaitUntil([](FakeCoordinator& f) { return f.registrations_locked().size() >= 2; }));
  fake_.RefuseRegistrations(grpc::Status::OK);  // the dead process's lease ran out
  ASSERT_TRUE(fake_.WaitUntil([](FakeCoordinator& f) { return !f.heartbeats_locked().empty(); }));
}

TEST_F(WorkerDaemonTest, StopDeregistersWithTheCauseThenReportsTheJobStopped) {
  fake_.Assign(TinyJob("job-000006", WriteText("stop.txt", 2000), 100000));
  StartWorker([this](int64_t step) {
    if (step == 2) daemon_->Stop("worker stopped by SIGTERM");
  });
  thread_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_;
  const std::vector<ReportProgressRequest> reports = fake_.reports();
  const JobOutcome outcome = OutcomeOf(reports);
  EXPECT_FALSE(outcome.succeeded());
  EXPECT_EQ(outcome.kind(), FAILURE_STOPPED);
  EXPECT_EQ(outcome.error(), "worker stopped by SIGTERM after step 2");
  EXPECT_EQ(StepsOf(reports), Range(1, 2));

  // Deregistered once, with the reason and the job, before the outcome went out; never
  // registered or heartbeat again.
  const std::vector<FakeCoordinator::Deregistration> gone = fake_.deregistrations();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].request.worker_id(), "w1");
  EXPECT_EQ(gone[0].request.session_id(), daemon_->session_id());
  EXPECT_EQ(gone[0].request.reason(), "worker stopped by SIGTERM");
  EXPECT_EQ(gone[0].request.running_job_id(), "job-000006");
  EXPECT_EQ(gone[0].request.running_step(), 2);
  for (size_t i = 0; i < gone[0].reports_before; ++i) EXPECT_FALSE(reports[i].has_outcome());
  EXPECT_EQ(fake_.registrations().size(), gone[0].registrations_before);
  // At most the heartbeat that was in flight when Stop was called.
  EXPECT_LE(fake_.heartbeats().size(), gone[0].heartbeats_before + 1);

  // The stop notice is a warning line of the job (dtrain logs); the outcome is not repeated.
  std::vector<dtrain::LogLine> lines;
  for (const auto& r : reports) {
    if (r.has_log()) lines.push_back(r.log());
  }
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].severity(), LOG_WARNING);
  EXPECT_EQ(lines[0].text(),
            "stopping: worker stopped by SIGTERM; stopping job job-000006 "
            "(last finished step 2)");
  daemon_.reset();
}

TEST_F(WorkerDaemonTest, ACoordinatorThatCannotDeregisterStillGetsTheStoppedOutcome) {
  fake_.RefuseDeregistrations(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "older coordinator"));
  fake_.Assign(TinyJob("job-000012", WriteText("stop_old.txt", 2000), 100000));
  StartWorker([this](int64_t step) {
    if (step == 2) daemon_->Stop("worker stopped by SIGTERM");
  });
  thread_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_;
  EXPECT_EQ(fake_.deregistrations().size(), 1u);
  const JobOutcome outcome = OutcomeOf(fake_.reports());
  EXPECT_EQ(outcome.kind(), FAILURE_STOPPED);
  EXPECT_EQ(outcome.error(), "worker stopped by SIGTERM after step 2");
  daemon_.reset();
}

// The answer to a heartbeat in flight when Stop deregisters is register_again (the session is
// gone): the leaving worker still delivers its job's outcome, not registering again.
TEST_F(WorkerDaemonTest, AHeartbeatInFlightWhileLeavingDoesNotHoldBackTheOutcome) {
  fake_.Assign(TinyJob("job-000013", WriteText("stop_mid_heartbeat.txt", 2000), 100000));
  StartWorker([this](int64_t step) {
    if (step != 2) return;
    fake_.HoldNextHeartbeatUntilDeregistered();
    ASSERT_TRUE(fake_.WaitUntil([](FakeCoordinator& f) { return f.heartbeat_held_locked(); }));
    daemon_->Stop("worker stopped by SIGTERM");
  });
  const absl::Time start = absl::Now();
  thread_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_;
  const std::vector<ReportProgressRequest> reports = fake_.reports();
  ASSERT_FALSE(reports.empty());
  ASSERT_TRUE(reports.back().has_outcome());
  EXPECT_EQ(reports.back().outcome().error(), "worker stopped by SIGTERM after step 2");
  EXPECT_EQ(fake_.deregistrations().size(), 1u);
  EXPECT_EQ(fake_.registrations().size(), 1u);
  // Not held until the shutdown grace (2 s) ran out with the outcome undelivered.
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  daemon_.reset();
}

TEST_F(WorkerDaemonTest, AnIdleWorkerDeregistersOnStop) {
  StartWorker();
  ASSERT_TRUE(fake_.WaitUntil([](FakeCoordinator& f) { return !f.heartbeats_locked().empty(); }));
  daemon_->Stop("worker stopped by SIGINT");
  thread_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_;
  const std::vector<FakeCoordinator::Deregistration> gone = fake_.deregistrations();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].request.reason(), "worker stopped by SIGINT");
  EXPECT_EQ(gone[0].request.running_job_id(), "");
  EXPECT_TRUE(fake_.reports().empty());
  daemon_.reset();
}

TEST_F(WorkerDaemonTest, SecondAssignmentWhileBusyIsRefused) {
  fake_.Assign(TinyJob("job-000007", WriteText("busy.txt", 2000), 100000));
  absl::Notification& release = release_;
  StartWorker([&](int64_t step) {
    if (step == 1) release.WaitForNotificationWithTimeout(kWait);
  });
  ASSERT_TRUE(fake_.WaitUntil([](FakeCoordinator& f) {
    return !f.heartbeats_locked().empty() &&
           f.heartbeats_locked().back().running_job_id() == "job-000007";
  }));
  fake_.Assign(TinyJob("job-000008", "x.txt", 5));
  ASSERT_TRUE(fake_.WaitUntil(HasOutcome));
  release.Notify();
  const std::vector<ReportProgressRequest> reports = fake_.reports();
  const JobOutcome outcome = OutcomeOf(reports);
  EXPECT_THAT(outcome.error(), HasSubstr("worker w1 is still running job job-000007"));
  for (const auto& r : reports) {
    if (r.has_outcome()) {
      EXPECT_EQ(r.job_id(), "job-000008");
    }
  }
}

TEST_F(WorkerDaemonTest, CancelInAProgressResponseStopsTheJob) {
  fake_.Assign(TinyJob("job-000009", WriteText("cancel_report.txt", 2000), 100000));
  fake_.CancelInReports("job-000009");
  StartWorker([this](int64_t step) {
    if (step == 1)
      fake_.WaitUntil([](FakeCoordinator& f) { return f.first_report_processed_locked(); });
  });
  ASSERT_TRUE(fake_.WaitUntil([](FakeCoordinator& f) {
    return f.first_report_processed_locked() &&
           f.heartbeats_locked().back().running_job_id().empty();
  }));
  // The first report is answered cancelled while step 1 is being finished: the job stops there.
  EXPECT_LE(StepsOf(fake_.reports()).size(), 1u);
  EXPECT_FALSE(HasOutcome(fake_));
}

TEST_F(WorkerDaemonTest, RegisterAgainKeepsTheRunningJob) {
  fake_.Assign(TinyJob("job-000010", WriteText("again.txt", 2000), 6));
  // The session is forgotten twice (a lease expiry, a coordinator restart): each time the
  // worker's next report or heartbeat is refused and it registers again with the job.
  StartWorker([this](int64_t step) {
    if (step != 2 && step != 4) return;
    fake_.ForgetSessions();
    const size_t want = step == 2 ? 2 : 3;
    fake_.WaitUntil([want](FakeCoordinator& f) { return f.registrations_locked().size() >= want; });
  });
  ASSERT_TRUE(fake_.WaitUntil(HasOutcome));
  const std::vector<RegisterWorkerRequest> registrations = fake_.registrations();
  ASSERT_EQ(registrations.size(), 3u);
  EXPECT_EQ(registrations[1].running_job_id(), "job-000010");
  EXPECT_EQ(registrations[1].running_step(), 2);
  EXPECT_EQ(registrations[2].running_job_id(), "job-000010");
  EXPECT_EQ(registrations[2].running_step(), 4);
  EXPECT_EQ(registrations[2].session_id(), daemon_->session_id());
  EXPECT_EQ(StepsOf(fake_.reports()), Range(1, 6));
  EXPECT_TRUE(OutcomeOf(fake_.reports()).succeeded());
}

// Bytes that are not UTF-8 in a quoted path (here where a symlink in the roots points) would
// make the report unparseable at the coordinator (an empty INTERNAL): the report is built
// valid, and the outcome arrives at once.
// A claimed job directory with one step of `bytes` bytes, under the test's temporary directory.
std::string ClaimedJobDir(const std::string& parent, const std::string& job_id, int bytes) {
  const std::string dir = TempPath(parent) + "/" + job_id;
  EXPECT_TRUE(ClaimJobDirectory(dir, job_id, "uid-" + job_id).ok());
  EXPECT_TRUE(MakeDirectories(dir + "/step_00000005").ok());
  std::ofstream(dir + "/step_00000005/shard_0.safetensors") << std::string(bytes, 'x');
  return dir;
}

JobDirRemoval RemovalOf(const std::string& dir, const std::string& job_id, const std::string& uid) {
  JobDirRemoval r;
  r.set_job_id(job_id);
  r.set_job_uid(uid);
  r.set_dir(dir);
  return r;
}

TEST_F(WorkerDaemonTest, ADeletedJobsDirectoryIsRemovedAndItsAnswerResentUntilDelivered) {
  const std::string dir = ClaimedJobDir("removal-once", "job-000021", 3000);
  fake_.RemoveDir(RemovalOf(dir, "job-000021", "uid-job-000021"), /*until_answered=*/false);
  fake_.FailHeartbeatsWithAnswers(2);  // the answer is lost twice on the way
  StartWorker();
  ASSERT_TRUE(fake_.WaitUntil([](FakeCoordinator& f) { return !f.dirs_removed_locked().empty(); }));
  const JobDirRemoved answer = fake_.dirs_removed().at(0);
  EXPECT_EQ(answer.state(), DIR_REMOVED) << answer.error();
  EXPECT_GT(answer.bytes(), 3000);  // the step's shard and job.json
  EXPECT_EQ(answer.job_id(), "job-000021");
  EXPECT_EQ(answer.dir(), dir);
  EXPECT_EQ(answer.worker_id(), "w1");
  EXPECT_EQ(answer.host(), "test-host");
  struct stat st;
  EXPECT_NE(lstat(dir.c_str(), &st), 0);
  // Delivered: the heartbeats after it no longer carry it.
  const size_t n = fake_.heartbeats().size();
  ASSERT_TRUE(
      fake_.WaitUntil([n](FakeCoordinator& f) { return f.heartbeats_locked().size() >= n + 3; }));
  EXPECT_EQ(fake_.dirs_removed().size(), 1u);
}

TEST_F(WorkerDaemonTest, ARemovalAskedAgainUntilAnsweredRunsOnceAndAnotherJobsDirIsKept) {
  const std::string ours = ClaimedJobDir("removal-again", "job-000022", 100);
  // Enough files that removing them usually spans heartbeats, asked again meanwhile.
  for (int i = 0; i < 3000; ++i) {
    std::ofstream(absl::StrCat(ours, "/step_00000005/part_", i)) << "x";
  }
  const std::string theirs = ClaimedJobDir("removal-again", "job-000023", 100);
  // Asked in every heartbeat answer until the worker's answer arrives.
  fake_.RemoveDir(RemovalOf(ours, "job-000022", "uid-job-000022"), /*until_answered=*/true);
  fake_.RemoveDir(RemovalOf(theirs, "job-000023", "uid-other"), /*until_answered=*/true);
  StartWorker();
  ASSERT_TRUE(
      fake_.WaitUntil([](FakeCoordinator& f) { return f.dirs_removed_locked().size() >= 2; }));
  const size_t n = fake_.heartbeats().size();
  ASSERT_TRUE(
      fake_.WaitUntil([n](FakeCoordinator& f) { return f.heartbeats_locked().size() >= n + 3; }));
  const std::vector<JobDirRemoved> answers = fake_.dirs_removed();
  ASSERT_EQ(answers.size(), 2u);
  for (const JobDirRemoved& a : answers) {
    if (a.job_id() == "job-000022") {
      EXPECT_EQ(a.state(), DIR_REMOVED) << a.error();
    } else {
      EXPECT_EQ(a.state(), DIR_REMOVAL_FAILED);
      EXPECT_THAT(a.error(), HasSubstr("belongs to job-000023 (uid uid-job-000023)"));
    }
  }
  struct stat st;
  EXPECT_NE(lstat(ours.c_str(), &st), 0);
  EXPECT_EQ(lstat((theirs + "/step_00000005/shard_0.safetensors").c_str(), &st), 0);
}

TEST_F(WorkerDaemonTest, AnErrorQuotingBytesThatAreNotUtf8IsDeliveredEscaped) {
  // Outside the worker's roots (the test's temporary directory), a name in Latin-1.
  const std::string outside = absl::StrCat("/tmp/dtrain-caf\xe9-", ::getpid());
  ::mkdir(outside.c_str(), 0755);
  std::ofstream(outside + "/data.bin") << "some text";
  const std::string link = TempPath("latin1-link.bin");
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink((outside + "/data.bin").c_str(), link.c_str()), 0);
  fake_.Assign(TinyJob("job-000012", link, 5));
  StartWorker();
  ASSERT_TRUE(fake_.WaitUntil(HasOutcome));
  const JobOutcome outcome = OutcomeOf(fake_.reports());
  EXPECT_FALSE(outcome.succeeded());
  EXPECT_THAT(outcome.error(), HasSubstr(absl::StrCat("/tmp/dtrain-caf\\xe9-", ::getpid())));
  EXPECT_EQ(fake_.registrations().size(), 1u);  // never taken for a refusal
  ::unlink((outside + "/data.bin").c_str());
  ::rmdir(outside.c_str());
}

// INTERNAL is not "the coordinator refused the job": no registering again, no dropped outcome;
// answered so 3 times, the outcome goes again with its text in ASCII.
TEST_F(WorkerDaemonTest, AnOutcomeAnsweredInternalIsRetriedThenSentShortened) {
  const std::string missing = TempPath("internal/none.bin");
  fake_.Assign(TinyJob("job-000013", missing, 5));
  fake_.AnswerInternalToOutcomes(3);
  StartWorker();
  ASSERT_TRUE(fake_.WaitUntil(HasOutcome));
  const JobOutcome outcome = OutcomeOf(fake_.reports());
  EXPECT_FALSE(outcome.succeeded());
  EXPECT_THAT(outcome.error(), HasSubstr("dataset " + missing));
  EXPECT_THAT(outcome.error(), HasSubstr("answered INTERNAL to the full report"));
  EXPECT_EQ(fake_.registrations().size(), 1u);
}

TEST_F(WorkerDaemonTest, AJobTheCoordinatorKeepsRefusingIsStopped) {
  fake_.Assign(TinyJob("job-000011", WriteText("refused.txt", 2000), 100000));
  fake_.RejectReportsOf("job-000011");
  StartWorker();
  // Refused: register again to re-attach, twice. Refused a third time: the job is not ours.
  ASSERT_TRUE(fake_.WaitUntil([](FakeCoordinator& f) {
    return f.registrations_locked().size() >= 3 && f.rejected_locked() >= 3 &&
           f.heartbeats_locked().back().running_job_id().empty();
  }));
  const std::vector<RegisterWorkerRequest> registrations = fake_.registrations();
  ASSERT_EQ(registrations.size(), 3u);
  EXPECT_EQ(registrations[1].running_job_id(), "job-000011");
  EXPECT_EQ(registrations[2].running_job_id(), "job-000011");
  EXPECT_TRUE(fake_.reports().empty());
}

// Only NOT_FOUND and FAILED_PRECONDITION say the coordinator does not know this session or job.
// Any other answer it does not expect (DATA_LOSS from a damaged database, PERMISSION_DENIED) is
// the coordinator's trouble: the reports are kept and sent again, the job trains on, and the
// worker neither registers again nor stops it.
TEST_F(WorkerDaemonTest, AnAnswerThatIsNoRefusalKeepsTheReportsAndTheJob) {
  fake_.AnswerReportsWith(
      grpc::Status(grpc::StatusCode::DATA_LOSS,
                   "coordinator db /var/lib/dtrain/db: database disk image is malformed"),
      3);
  fake_.Assign(TinyJob("job-000012", WriteText("damaged.txt", 2000), 8));
  StartWorker();
  ASSERT_TRUE(fake_.WaitUntil(HasOutcome));
  EXPECT_EQ(fake_.answered(), 3);
  EXPECT_EQ(StepsOf(fake_.reports()), Range(1, 8));
  EXPECT_TRUE(OutcomeOf(fake_.reports()).succeeded());
  EXPECT_EQ(fake_.registrations().size(), 1u);
}

// Answers lost after the coordinator recorded the reports: each is sent again under the number it
// had (ReportProgressRequest.report_seq), by which the coordinator knows the copy; the numbers
// of different reports increase.
TEST_F(WorkerDaemonTest, AReportSentAgainAfterALostAnswerKeepsItsNumber) {
  fake_.LoseAnswers(3);
  fake_.Assign(TinyJob("job-000013", WriteText("lost.txt", 2000), 8));
  StartWorker();
  ASSERT_TRUE(fake_.WaitUntil(HasOutcome));
  const std::vector<ReportProgressRequest> reports = fake_.reports();
  std::map<uint64_t, std::string> by_seq;  // number -> the report's content
  uint64_t highest = 0;
  int copies = 0;
  for (const ReportProgressRequest& r : reports) {
    ReportProgressRequest content = r;
    content.clear_time_unix_ms();
    ASSERT_GT(r.report_seq(), 0u);
    auto [it, fresh] = by_seq.emplace(r.report_seq(), content.SerializeAsString());
    if (!fresh) {
      ++copies;
      EXPECT_EQ(it->second, content.SerializeAsString()) << "report " << r.report_seq();
      continue;
    }
    EXPECT_GT(r.report_seq(), highest);
    highest = r.report_seq();
  }
  EXPECT_EQ(copies, 3);
  EXPECT_TRUE(OutcomeOf(reports).succeeded());
}

TEST(Backoff, DoublesUpToTheCapWithJitter) {
  Backoff b(absl::Milliseconds(100), absl::Milliseconds(1000));
  const int64_t expected[] = {100, 200, 400, 800, 1000, 1000};
  for (int64_t ms : expected) {
    const absl::Duration d = b.Next();
    EXPECT_LE(d, absl::Milliseconds(ms));
    EXPECT_GE(d, absl::Milliseconds(ms * 8 / 10));
  }
  b.Reset();
  EXPECT_LE(b.Next(), absl::Milliseconds(100));
}

}  // namespace
}  // namespace dtrain::worker
