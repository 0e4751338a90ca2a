// dtrain-worker as a process: flags, a worker id another live worker holds (exit 1), and
// SIGTERM in the middle of a job (the job stops at a step boundary, its outcome says why, the
// process exits 0).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/daemon/fake_coordinator.h"

extern char** environ;

namespace dtrain::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string WorkerBinary() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
                      "/worker/dtrain-worker");
}

// Starts dtrain-worker with `args` (and --insecure unless `insecure` is false: the fake
// coordinator is plaintext); stdout and stderr go to `log`.
pid_t Spawn(const std::vector<std::string>& args, const std::string& log, bool insecure = true) {
  std::vector<std::string> all = {WorkerBinary()};
  if (insecure) all.push_back("--insecure");
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// The exit code, or -1 if it did not exit within `timeout` (then it is killed).
int WaitExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

TEST(DtrainWorker, WorkerIdIsRequired) {
  pid_t pid = Spawn({"--coordinator=127.0.0.1:1"}, TempPath("no_id.log"));
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid, kWait), 1);
}

TEST(DtrainWorker, UnknownFlagIsAnError) {
  pid_t pid = Spawn({"--worker_id=w", "--no_such_flag=1"}, TempPath("bad_flag.log"));
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid, kWait), 1);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(DtrainWorker, HelpListsTheWorkersOwnFlags) {
  const std::string log = TempPath("help.log");
  pid_t pid = Spawn({"--help"}, log);
  ASSERT_GT(pid, 0);
  WaitExit(pid, kWait);  // absl's --help exits 1
  const std::string text = ReadFile(log);
  EXPECT_THAT(text, HasSubstr("The dtrain worker daemon"));
  for (const char* flag :
       {"--worker_id", "--coordinator", "--device", "--data_root", "--advertise_address",
        "--comm_timeout", "--metrics_listen", "--tls_ca", "--tls_cert", "--tls_key", "--insecure",
        "--data_connections", "--data_port"}) {
    EXPECT_THAT(text, HasSubstr(flag));
  }
  EXPECT_THAT(text, Not(HasSubstr("No flags matched")));
}

// The production binary cannot be told to inject a fault: the --test_only_* flags exist only in
// dtrain-worker-testing (test_only_faults.h).
TEST(DtrainWorker, HasNoTestOnlyFlags) {
  const std::string log = TempPath("helpfull.log");
  pid_t pid = Spawn({"--helpfull"}, log);
  ASSERT_GT(pid, 0);
  WaitExit(pid, kWait);
  const std::string text = ReadFile(log);
  EXPECT_THAT(text, HasSubstr("--worker_id"));  // the help was printed
  EXPECT_THAT(text, Not(HasSubstr("test_only")));

  pid = Spawn({"--worker_id=w", "--test_only_step_delay=1s"}, TempPath("test_only.log"));
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid, kWait), 1);  // an unknown flag
}

TEST(DtrainWorker, NeitherTlsFilesNorInsecureRefusesToStart) {
  const std::string log = TempPath("no_tls.log");
  pid_t pid = Spawn({"--worker_id=w", "--coordinator=127.0.0.1:1", "--device=cpu"}, log,
                    /*insecure=*/false);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid, kWait), 2);
  EXPECT_EQ(ReadFile(log),
            "dtrain-worker: error: the worker needs --tls_ca, --tls_cert and --tls_key (make them "
            "with `dtrain certs init DIR`), or --insecure to run without TLS (anyone who can "
            "reach the port controls the cluster)\n");
}

// The worker started with one bad flag exits 1 with `want` in its log.
void ExpectRefused(const std::string& name, const std::string& flag, const std::string& want) {
  const std::string log = TempPath(name + ".log");
  pid_t pid = Spawn({"--worker_id=w", "--coordinator=127.0.0.1:1", "--device=cpu", flag,
                     "--data_root=" + TempPath(name)},
                    log);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid, kWait), 1);
  EXPECT_THAT(ReadFile(log), HasSubstr(want));
}

TEST(DtrainWorker, DataConnectionsOutOfRangeExitsOneNamingTheFlag) {
  ExpectRefused("bad_connections", "--data_connections=17",
                "--data_connections=17 must be -1 (default), 0 (none) or at most 16");
}

TEST(DtrainWorker, DataPortOutOfRangeExitsOneNamingTheFlag) {
  ExpectRefused("bad_data_port", "--data_port=70000",
                "--data_port=70000 must be a port, 0 to 65535");
}

TEST(DtrainWorker, MatmulPrecisionIsAJobsChoiceAndTheFlagSaysSo) {
  ExpectRefused("precision_flag", "--matmul_precision=bf16",
                "--matmul_precision=bf16: the GEMM precision is a job's choice, not a worker's: "
                "set \"matmul_precision\": \"bf16\" in the job spec");
}

TEST(DtrainWorker, AdvertiseAddressNeedsAPort) {
  ExpectRefused("bad_address", "--advertise_address=10.0.0.1",
                "--advertise_address=10.0.0.1 must be host:port");
}

TEST(DtrainWorker, AnAllowedPathThatDoesNotExistExitsOneNamingIt) {
  const std::string log = TempPath("missing_root.log");
  const std::string missing = TempPath("no_such_root");
  pid_t pid = Spawn({"--worker_id=w", "--coordinator=127.0.0.1:1", "--device=cpu",
                     "--data_root=" + TempPath("missing_root_data"), "--allowed_paths=" + missing},
                    log);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid, kWait), 1);
  EXPECT_THAT(ReadFile(log), HasSubstr("--data_root / --allowed_paths: allowed root " + missing +
                                       " cannot be used: No such file or directory"));
}

TEST(DtrainWorker, AWorkerIdAnotherLiveWorkerHoldsExitsOne) {
  FakeCoordinator fake;
  fake.RefuseRegistrations(grpc::Status(
      grpc::StatusCode::ALREADY_EXISTS,
      "worker id \"dup\" is held by another live session (last heartbeat 0.1s ago, lease "
      "10.0s); is a second worker running with this --worker_id?"));
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartServer(&fake, &port);
  ASSERT_NE(server, nullptr);
  const std::string log = TempPath("duplicate.log");
  pid_t pid =
      Spawn({"--worker_id=dup", absl::StrCat("--coordinator=127.0.0.1:", port), "--device=cpu",
             "--threads=1", "--data_root=" + TempPath("dup_root"), "--id_conflict_wait=300ms"},
            log);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid, kWait), 1);
  const std::string text = ReadFile(log);
  EXPECT_THAT(text, HasSubstr("dtrain-worker: error: RegisterWorker to coordinator"));
  EXPECT_THAT(text, HasSubstr("worker id \"dup\" is held by another live session"));
  EXPECT_THAT(text, HasSubstr("every worker process needs its own --worker_id"));
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(DtrainWorker, SigtermStopsTheJobAtAStepBoundaryAndExitsZero) {
  FakeCoordinator fake;
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartServer(&fake, &port);
  ASSERT_NE(server, nullptr);
  fake.Assign(TinyJob("job-000042", WriteText("sigterm.txt", 2000), 1000000));
  pid_t pid =
      Spawn({"--worker_id=proc1", absl::StrCat("--coordinator=127.0.0.1:", port), "--device=cpu",
             "--threads=1", "--data_root=" + TempPath("proc_root"),
             "--allowed_paths=" + ::testing::TempDir(), "--rpc_timeout=2s", "--log_every=0"},
            TempPath("sigterm.log"));
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(
      fake.WaitUntil([](FakeCoordinator& f) { return StepsOf(f.reports_locked()).size() >= 3; }));
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitExit(pid, kWait), 0);
  const std::vector<ReportProgressRequest> reports = fake.reports();
  ASSERT_FALSE(reports.empty());
  ASSERT_TRUE(reports.back().has_outcome());
  const JobOutcome outcome = reports.back().outcome();
  EXPECT_FALSE(outcome.succeeded());
  EXPECT_THAT(outcome.error(), StartsWith("worker stopped by SIGTERM after step "));
  const std::vector<int64_t> steps = StepsOf(reports);
  EXPECT_EQ(steps, Range(1, steps.back()));
  // The last finished step, then (when the signal came mid-step) where the next one stopped:
  // "...after step 9; step 10 stopped in the backward pass before layer 1 of 2".
  const std::string stopped = absl::StrCat("worker stopped by SIGTERM after step ", steps.back());
  EXPECT_TRUE(outcome.error() == stopped || absl::StartsWith(outcome.error(), stopped + "; "))
      << outcome.error();
  EXPECT_EQ(outcome.kind(), FAILURE_STOPPED);
  EXPECT_EQ(fake.registrations().at(0).worker_id(), "proc1");
  EXPECT_THAT(ReadFile(TempPath("sigterm.log")),
              HasSubstr("dtrain-worker: WARNING: --insecure: every connection to "));
  // It left the coordinator first, saying why, and did not come back.
  const std::vector<FakeCoordinator::Deregistration> gone = fake.deregistrations();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].request.reason(), "worker stopped by SIGTERM");
  EXPECT_EQ(gone[0].request.running_job_id(), "job-000042");
  EXPECT_EQ(fake.registrations().size(), gone[0].registrations_before);
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace dtrain::worker
