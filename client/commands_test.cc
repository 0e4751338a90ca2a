// The CLI's commands and CoordinatorStub against a fake Coordinator service on a loopback port:
// arguments, output, exit codes, and watch reconnecting after a broken stream.
#include "client/commands.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A job of a long history (20,000 steps recorded): a terminal or --quiet watch starts at its
// newest step.
constexpr char kLongJob[] = "job-000012";

Job MakeJob(const std::string& id, JobState state) {
  Job job;
  job.set_id(id);
  job.set_state(state);
  job.mutable_spec()->set_name("tiny");
  job.mutable_spec()->set_steps(3);
  job.mutable_spec()->set_batch_size(2);
  job.mutable_spec()->mutable_model()->set_context(8);
  return job;
}

JobUpdate StateUpdate(const Job& job, JobState state, int64_t time_ms) {
  JobUpdate u;
  *u.mutable_job() = job;
  u.mutable_job()->set_state(state);
  u.mutable_state_change()->set_state(state);
  u.mutable_state_change()->set_time_unix_ms(time_ms);
  return u;
}

JobUpdate StepUpdate(const Job& job, int64_t step, double loss) {
  JobUpdate u;
  *u.mutable_job() = job;
  u.mutable_job()->set_state(RUNNING);
  StepMetrics* m = u.mutable_step();
  m->set_step(step);
  m->set_loss(loss);
  m->set_tokens_per_s(100);
  m->set_time_unix_ms(1000 * step);
  *u.mutable_job()->mutable_latest() = *m;
  return u;
}

// job-000001: a job that trains 3 steps and SUCCEEDS; job-000002: already ended (cancel fails);
// job-000009: its first watch stream breaks after step 2 (UNAVAILABLE), the second finishes it.
class FakeCoordinator final : public Coordinator::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const SubmitJobRequest* request,
                         SubmitJobResponse* response) override {
    if (absl::StrContains(request->spec_json(), "bad")) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "invalid job spec (2 problems):\nparallel.tp: 3 does not divide "
                          "model.n_head 4\nfoo: unknown field");
    }
    {
      absl::MutexLock lock(&mu);
      last_submit = *request;
    }
    *response->mutable_job() = MakeJob("job-000001", QUEUED);
    response->mutable_job()->set_reason("waiting for 1 idle worker");
    if (absl::StrContains(request->spec_json(), "big")) {
      response->add_warnings("it needs 8 workers; 1 is registered");
    }
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const GetJobRequest* request, Job* job) override {
    if (request->job_id() == kLongJob) {  // running at step 20,000 of 30,000
      *job = MakeJob(kLongJob, RUNNING);
      job->mutable_spec()->set_steps(30000);
      *job->mutable_latest() = StepUpdate(*job, 20000, 1.5).step();
      return grpc::Status::OK;
    }
    if (request->job_id() == "job-000002") {
      *job = MakeJob("job-000002", SUCCEEDED);
      for (auto [state, ms] : {std::pair{QUEUED, 1000}, {RUNNING, 3000}, {SUCCEEDED, 9000}}) {
        StateChange* change = job->add_history();
        change->set_state(state);
        change->set_reason(absl::StrCat("reason ", ms));
        change->set_time_unix_ms(ms);
      }
      return grpc::Status::OK;
    }
    if (request->job_id() != "job-000001") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->job_id());
    }
    if (checkpoint_asked && restart_after_ask) {  // the coordinator restarts: the ask is lost
      restart_after_ask = false;
      checkpoint_asked = false;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "failed to connect to all addresses");
    }
    if (recovering_polls > 0) {  // back, but the job is not running yet
      --recovering_polls;
      *job = MakeJob("job-000001", RECOVERING);
      return grpc::Status::OK;
    }
    *job = MakeJob("job-000001", RUNNING);
    if (checkpoint_asked) {  // the next poll after `dtrain checkpoint`: sealed, or skipped
      if (skip_checkpoint) {
        job->mutable_checkpoint()->set_last_skipped_step(5);
        job->mutable_checkpoint()->set_last_skip_reason("rank 0: no space left on /ck");
      } else {
        job->mutable_checkpoint()->set_last_sealed_step(7);
        job->mutable_checkpoint()->set_dir("/ck/job-000001");
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status CheckpointJob(grpc::ServerContext*, const CheckpointJobRequest* request,
                             Job* job) override {
    if (request->job_id() != "job-000001") {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          request->job_id() + " is SUCCEEDED: only a running job is asked");
    }
    *job = MakeJob("job-000001", RUNNING);
    checkpoint_asked = true;
    ++checkpoint_asks;
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const ListJobsRequest* request,
                        ListJobsResponse* response) override {
    *response->add_jobs() = MakeJob("job-000003", FAILED);
    response->mutable_jobs(0)->mutable_spec()->set_name("twice");
    *response->add_jobs() = MakeJob("job-000002", SUCCEEDED);
    response->mutable_jobs(1)->mutable_spec()->set_name("twice");
    *response->add_jobs() = MakeJob("job-000001", RUNNING);
    if (!request->name().empty()) {  // the coordinator's name index
      for (int i = response->jobs_size() - 1; i >= 0; --i) {
        if (response->jobs(i).spec().name() != request->name()) {
          response->mutable_jobs()->DeleteSubrange(i, 1);
        }
      }
    }
    if (request->limit() == 1) response->mutable_jobs()->DeleteSubrange(1, 2);
    if (request->limit() == 2 && request->name().empty()) {
      response->mutable_jobs()->DeleteSubrange(2, 1);
      response->set_next_page_token("2");
    }
    last_limit = request->limit();
    absl::MutexLock lock(&mu);
    last_states.assign(request->states().begin(), request->states().end());
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext*, const CancelJobRequest* request, Job* job) override {
    if (request->job_id() == "job-000002") {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "job-000002 already ended SUCCEEDED: 3/3 steps");
    }
    if (request->job_id() != "job-000001") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->job_id());
    }
    *job = MakeJob(request->job_id(), CANCELLED);
    job->set_reason(request->reason());
    return grpc::Status::OK;
  }

  grpc::Status ListWorkers(grpc::ServerContext*, const ListWorkersRequest*,
                           ListWorkersResponse* response) override {
    WorkerInfo* w = response->add_workers();
    w->set_worker_id("w1");
    w->set_state(IDLE);
    w->mutable_device()->set_kind("cpu");
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext*, const WatchJobRequest* request,
                        grpc::ServerWriter<JobUpdate>* writer) override {
    {
      absl::MutexLock lock(&mu);
      watch_after_steps.push_back(request->after_step());
    }
    const std::string& id = request->job_id();
    if (id == kLongJob) {  // steps after after_step up to 20,000, then it ends
      Job job = MakeJob(id, RUNNING);
      job.mutable_spec()->set_steps(30000);
      writer->Write(StateUpdate(job, RUNNING, 2));
      for (int64_t step = request->after_step() + 1; step <= 20000; ++step) {
        writer->Write(StepUpdate(job, step, step == 1 ? 9.0 : 1.5));
      }
      job.set_state(CANCELLED);
      *job.mutable_latest() = StepUpdate(job, 20000, 1.5).step();
      writer->Write(StateUpdate(job, CANCELLED, 3));
      return grpc::Status::OK;
    }
    if (id == "job-000010") {  // one step, then the coordinator goes away for good
      writer->Write(StepUpdate(MakeJob(id, RUNNING), 1, 4.0));
      if (on_gone) on_gone();
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down");
    }
    if (id != "job-000001" && id != "job-000009") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + id);
    }
    const Job job = MakeJob(id, RUNNING);
    writer->Write(StateUpdate(job, QUEUED, 1));
    writer->Write(StateUpdate(job, RUNNING, 2));
    JobUpdate event;
    *event.mutable_job() = job;
    event.set_event("loaded dataset");
    writer->Write(event);  // events are replayed on every stream, as the history is
    const bool break_now = id == "job-000009" && watch_calls++ == 0;
    for (int64_t step = request->after_step() + 1; step <= 3; ++step) {
      writer->Write(StepUpdate(job, step, 5.0 - step));
      if (break_now && step == 2) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down");
      }
    }
    Job done = MakeJob(id, SUCCEEDED);
    *done.mutable_latest() = StepUpdate(job, 3, 2.0).step();
    done.set_output("/tmp/jobs/" + id + "/model.safetensors");
    JobUpdate last = StateUpdate(done, SUCCEEDED, 3);
    writer->Write(last);
    return grpc::Status::OK;
  }

  // The first step of kLongJob (the only range asked of it).
  grpc::Status GetJobSteps(grpc::ServerContext*, const GetJobStepsRequest* request,
                           GetJobStepsResponse* response) override {
    if (request->job_id() != kLongJob) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no");
    *response->add_steps() = StepUpdate(MakeJob(kLongJob, RUNNING), 1, 9.0).step();
    response->set_recorded(1);
    return grpc::Status::OK;
  }

  grpc::Status ForgetWorker(grpc::ServerContext*, const ForgetWorkerRequest* request,
                            ForgetWorkerResponse*) override {
    if (request->worker_id() == "w1") {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "w1 is IDLE, not LOST");
    }
    if (request->worker_id() != "w3") return grpc::Status(grpc::StatusCode::NOT_FOUND, "no w");
    return grpc::Status::OK;
  }

  grpc::Status ListCheckpoints(grpc::ServerContext*, const ListCheckpointsRequest* request,
                               ListCheckpointsResponse* response) override {
    if (request->job_id() != "job-000001") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->job_id());
    }
    response->mutable_status()->set_dir("/ckpt/job-000001");
    response->mutable_status()->set_host("hostA");
    response->mutable_status()->set_interval_steps(10);
    CheckpointInfo* info = response->add_checkpoints();
    info->set_step(10);
    info->set_path("/ckpt/job-000001/step_00000010");
    return grpc::Status::OK;
  }

  // Two lines: the coordinator's (rank -1) and rank 1's error; with a rank, only that rank's.
  // job-000002: a line at 2 s and one at 4 s, between its state changes (GetJob).
  grpc::Status JobLogs(grpc::ServerContext*, const JobLogsRequest* request,
                       grpc::ServerWriter<LogEntry>* writer) override {
    if (request->job_id() == "job-000002") {
      for (int64_t ms : {2000, 4000}) {
        LogEntry entry;
        entry.set_seq(ms / 2000);
        entry.set_rank(ms == 2000 ? -1 : 0);
        entry.set_worker_id(ms == 2000 ? "" : "w1");
        entry.set_time_unix_ms(ms);
        entry.set_text(absl::StrCat("line ", ms));
        writer->Write(entry);
      }
      return grpc::Status::OK;
    }
    if (request->job_id() != "job-000001") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->job_id());
    }
    LogEntry entry;
    entry.set_seq(1);
    entry.set_rank(-1);
    entry.set_text("placed on w1, w2");
    if (!request->has_rank()) writer->Write(entry);
    entry.set_seq(2);
    entry.set_rank(1);
    entry.set_worker_id("w2");
    entry.set_severity(LOG_ERROR);
    entry.set_text("worker stopped by SIGTERM after step 20");
    if (!request->has_rank() || request->rank() == 1) writer->Write(entry);
    return grpc::Status::OK;
  }

  absl::Mutex mu;
  SubmitJobRequest last_submit ABSL_GUARDED_BY(mu);
  std::vector<int> last_states ABSL_GUARDED_BY(mu);
  std::vector<int64_t> watch_after_steps ABSL_GUARDED_BY(mu);
  std::atomic<int> watch_calls{0};
  std::atomic<int> last_limit{-1};
  std::atomic<bool> checkpoint_asked{false};
  std::atomic<bool> skip_checkpoint{false};
  std::atomic<bool> restart_after_ask{false};
  std::atomic<int> recovering_polls{0};
  std::atomic<int> checkpoint_asks{0};
  std::function<void()> on_gone;
};

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  void TearDown() override {
    if (stopper_.joinable()) stopper_.join();
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  // Runs `dtrain args...` against the fake; fills out_/err_ and returns the exit code.
  int Run(std::vector<std::string> args, bool tty = false, std::istream* in = nullptr) {
    args.push_back("--coordinator=" + address_);
    absl::StatusOr<Invocation> inv = ParseArguments(args, nullptr);
    EXPECT_TRUE(inv.ok()) << inv.status();
    if (!inv.ok()) return -1;
    StubOptions options;
    options.timeout = inv->timeout;
    options.reconnect_for = inv->reconnect_for;
    auto stub = CoordinatorStub::Connect(inv->coordinator, options);
    out_.str("");
    err_.str("");
    Output output{out_, err_, tty, in, on_watch_};
    return RunInvocation(*inv, *stub, output);
  }

  FakeCoordinator fake_;
  std::unique_ptr<grpc::Server> server_;
  std::thread stopper_;
  std::string address_;
  std::ostringstream out_, err_;
  std::function<void(const std::string&)> on_watch_;
};

TEST(ParseArguments, GlobalFlagsAnywhere) {
  absl::StatusOr<Invocation> inv =
      ParseArguments({"--json", "status", "job-000001", "--timeout", "3s"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, "status");
  EXPECT_EQ(inv->args, std::vector<std::string>{"job-000001"});
  EXPECT_TRUE(inv->json);
  EXPECT_EQ(inv->timeout, absl::Seconds(3));
  EXPECT_EQ(inv->coordinator, kDefaultCoordinator);
}

TEST(ParseArguments, CoordinatorFlagBeatsEnvironmentBeatsDefault) {
  EXPECT_EQ(ParseArguments({"list"}, "h:1")->coordinator, "h:1");
  EXPECT_EQ(ParseArguments({"list", "--coordinator=h:2"}, "h:1")->coordinator, "h:2");
  EXPECT_EQ(ParseArguments({"list"}, nullptr)->coordinator, "127.0.0.1:7070");
}

TEST(ParseArguments, FlagsDoNotLeakBetweenCalls) {
  ASSERT_TRUE(ParseArguments({"list", "--json", "--limit=3"}, nullptr).ok());
  absl::StatusOr<Invocation> inv = ParseArguments({"list"}, nullptr);
  EXPECT_FALSE(inv->json);
  EXPECT_EQ(inv->limit, 0);
}

TEST(ParseArguments, BoolFlagsNegate) {
  EXPECT_FALSE(ParseArguments({"list", "--json", "--nojson"}, nullptr)->json);
  EXPECT_TRUE(ParseArguments({"submit", "a.json", "--watch=true"}, nullptr)->watch);
}

TEST(ParseArguments, UsageErrorsNameTheirCause) {
  auto message = [](std::vector<std::string> args) {
    absl::StatusOr<Invocation> inv = ParseArguments(args, nullptr);
    EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(inv.status().message());
  };
  EXPECT_THAT(message({}), HasSubstr("no command"));
  EXPECT_THAT(message({"frobnicate"}), HasSubstr("unknown command 'frobnicate'"));
  EXPECT_THAT(message({"list", "--bogus"}), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(message({"list", "--timeout=soon"}), HasSubstr("--timeout"));
  EXPECT_THAT(message({"list", "--timeout=0s"}), HasSubstr("--timeout must be positive"));
  EXPECT_THAT(message({"list", "--timeout"}), HasSubstr("--timeout needs a value"));
  EXPECT_THAT(message({"status"}), HasSubstr("needs a job id"));
  EXPECT_THAT(message({"submit"}), HasSubstr("needs a job spec file"));
  EXPECT_THAT(message({"export", "ckpt"}),
              HasSubstr("needs a checkpoint directory and an output file"));
  EXPECT_THAT(message({"watch", "a", "b"}), HasSubstr("unexpected argument 'b'"));
  EXPECT_THAT(message({"list", "--watch"}),
              HasSubstr("--watch applies to 'submit', 'resubmit' only, not 'list'"));
  EXPECT_THAT(message({"list", "--state=RUNING"}), HasSubstr("'RUNING' is not a job state"));
  EXPECT_THAT(message({"watch", "x", "--every=0"}), HasSubstr("--every must be at least 1"));
  EXPECT_THAT(message({"logs", "x", "--rank=-2"}), HasSubstr("--rank must not be negative"));
  EXPECT_THAT(message({"status", "x", "--rank=1"}), HasSubstr("applies to 'logs' only"));
  EXPECT_THAT(message({"status", "x", "--reason=r"}), HasSubstr("applies to 'cancel' only"));
}

TEST(ParseArguments, DoubleDashEndsFlags) {
  absl::StatusOr<Invocation> inv = ParseArguments({"status", "--", "--odd-id"}, nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->args, std::vector<std::string>{"--odd-id"});
}

TEST(ParseArguments, HelpNeedsNoCoordinator) {
  EXPECT_TRUE(ParseArguments({"--help"}, nullptr)->help);
  EXPECT_TRUE(ParseArguments({"help"}, nullptr)->help);
  EXPECT_TRUE(ParseArguments({"watch", "--help"}, nullptr)->help);
}

TEST(ExitCodeFor, MapsStatusCodes) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("")), 2);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("")), 3);
  EXPECT_EQ(ExitCodeFor(absl::DeadlineExceededError("")), 3);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("")), 4);
  EXPECT_EQ(ExitCodeFor(absl::FailedPreconditionError("")), 6);
  EXPECT_EQ(ExitCodeForJob(SUCCEEDED), 0);
  EXPECT_EQ(ExitCodeForJob(FAILED), 1);
  EXPECT_EQ(ExitCodeForJob(CANCELLED), 5);
}

// The happy path of export (shards of every layout to one file) is in
// worker/parallel/sharded_checkpoint_test.cc and the multi-worker integration test.
TEST_F(CommandsTest, ExportOfAMissingCheckpointExits4NamingIt) {
  const std::string missing = ::testing::TempDir() + "/no-such-checkpoint";
  EXPECT_EQ(Run({"export", missing, ::testing::TempDir() + "/out.safetensors"}), 4);
  EXPECT_THAT(err_.str(), HasSubstr("no-such-checkpoint"));
}

// What the files hold is client/certs_test's; here the command: what it prints and its refusals.
TEST_F(CommandsTest, CertsInitWritesTheFilesAndRefusesASecondCa) {
  const std::string dir = ::testing::TempDir() + "/commands_certs";
  std::system(("rm -rf " + dir).c_str());
  EXPECT_EQ(Run({"certs", "init", dir, "--host=10.1.2.3"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("wrote " + dir + "/ca.key"));
  EXPECT_THAT(out_.str(), HasSubstr("wrote " + dir + "/viewer.pem"));
  EXPECT_THAT(out_.str(), HasSubstr("next: start the coordinator with --tls_ca=" + dir));
  EXPECT_EQ(Run({"certs", "init", dir}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("not replacing the cluster CA"));
  EXPECT_EQ(Run({"certs", "issue", dir, "carol", "--role=viewer", "--not_after=2020-01-01"}), 0)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("wrote " + dir + "/carol.key"));
  EXPECT_EQ(Run({"certs", "issue", dir, "dave"}), 2);  // no --role
  EXPECT_EQ(Run({"certs", "issue", dir, "dave", "--role=root"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("unknown role 'root'"));
}

// `dtrain checkpoint JOB`: asks, follows the job until a later step is sealed; a step skipped
// (a full disk) ends it with the reason; a job not running is refused.
TEST_F(CommandsTest, CheckpointWaitsForTheSealOrSaysWhyNot) {
  EXPECT_EQ(Run({"checkpoint", "job-000001"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str().substr(0, out_.str().find('\n')),
            "job-000001: checkpoint asked for (last sealed: none); waiting for its seal");
  EXPECT_THAT(out_.str(), HasSubstr("job-000001: step 7 sealed in "));
  EXPECT_THAT(out_.str(), HasSubstr("(/ck/job-000001; dtrain checkpoints lists it)\n"));
  fake_.checkpoint_asked = false;
  fake_.skip_checkpoint = true;
  EXPECT_EQ(Run({"checkpoint", "job-000001"}), kExitOtherError);
  EXPECT_THAT(err_.str(), HasSubstr("job-000001: the checkpoint of step 5 was skipped, training "
                                    "went on: rank 0: no space left on /ck"));
  EXPECT_EQ(Run({"checkpoint", "job-000002"}), kExitOtherError);
  EXPECT_THAT(err_.str(), HasSubstr("job-000002 is SUCCEEDED"));
}

// The coordinator restarts while `dtrain checkpoint` waits, and with it the ask is gone: once
// it answers again and the job runs again (it is RECOVERING for two polls here), the job is
// asked again, and the wait ends on the seal.
TEST_F(CommandsTest, CheckpointAsksAgainAfterTheCoordinatorCameBack) {
  fake_.restart_after_ask = true;
  fake_.recovering_polls = 2;
  EXPECT_EQ(Run({"checkpoint", "job-000001"}), kExitOk) << err_.str();
  EXPECT_EQ(fake_.checkpoint_asks, 2);
  EXPECT_THAT(err_.str(),
              HasSubstr("(GetJob: failed to connect to all addresses); reconnecting for "
                        "up to 1m"));
  EXPECT_THAT(err_.str(), HasSubstr("; asking job-000001 for its checkpoint again"));
  EXPECT_THAT(out_.str(), HasSubstr("job-000001: step 7 sealed in "));
}

TEST_F(CommandsTest, StatusPrintsTheJob) {
  EXPECT_EQ(Run({"status", "job-000001"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("state:     RUNNING"));
}

TEST_F(CommandsTest, StatusJsonIsOneObject) {
  EXPECT_EQ(Run({"status", "job-000001", "--json"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("\"id\":\"job-000001\""));
  EXPECT_THAT(out_.str(), HasSubstr("\"state\":\"RUNNING\""));
}

TEST_F(CommandsTest, UnknownJobExits4) {
  EXPECT_EQ(Run({"status", "job-999999"}), 4);
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND"));
  EXPECT_THAT(err_.str(), HasSubstr("job-999999"));
  EXPECT_EQ(Run({"watch", "job-999999"}), 4);
}

TEST_F(CommandsTest, ListPassesLimitAndPrintsATable) {
  EXPECT_EQ(Run({"list", "--limit=5"}), 0);
  EXPECT_EQ(fake_.last_limit, 5);
  EXPECT_THAT(out_.str(), HasSubstr("job-000002  SUCCEEDED"));
  EXPECT_THAT(out_.str(), HasSubstr("job-000001  RUNNING"));
}

TEST_F(CommandsTest, WorkersTable) {
  EXPECT_EQ(Run({"workers"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("ID  STATE  DEVICE"));
  EXPECT_THAT(out_.str(), HasSubstr("w1  IDLE   cpu"));
}

TEST_F(CommandsTest, SubmitUnreadableFileExits2) {
  EXPECT_EQ(Run({"submit", "/nonexistent/job.json"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("cannot read /nonexistent/job.json"));
}

TEST_F(CommandsTest, SubmitRejectedListsEveryProblem) {
  const std::string path = ::testing::TempDir() + "/bad.json";
  std::ofstream(path) << "{\"bad\": 1}";
  EXPECT_EQ(Run({"submit", path}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("rejected " + path +
                                    ":\n"
                                    "  parallel.tp: 3 does not divide model.n_head 4\n"
                                    "  foo: unknown field\n"));
}

TEST_F(CommandsTest, SubmitPrintsTheQueuedJob) {
  const std::string path = ::testing::TempDir() + "/good.json";
  std::ofstream(path) << "{\"steps\": 3}";
  EXPECT_EQ(Run({"submit", path}), 0);
  EXPECT_EQ(out_.str(), "submitted job-000001 (tiny): QUEUED: waiting for 1 idle worker\n");
}

TEST_F(CommandsTest, SubmitWatchFollowsToSuccess) {
  const std::string path = ::testing::TempDir() + "/good.json";
  std::ofstream(path) << "{\"steps\": 3}";
  EXPECT_EQ(Run({"submit", path, "--watch"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("job-000001 RUNNING step 3/3 loss 2.0000 100 tok/s"));
  EXPECT_THAT(out_.str(), HasSubstr("job-000001 SUCCEEDED: 3/3 steps, loss 4.0000 -> 2.0000, "
                                    "output /tmp/jobs/job-000001/model.safetensors\n"));
}

TEST_F(CommandsTest, WatchPipedPrintsOneLinePerStep) {
  EXPECT_EQ(Run({"watch", "job-000001"}), 0);
  EXPECT_EQ(out_.str(),
            "job-000001 QUEUED\n"
            "job-000001 RUNNING\n"
            "job-000001 event: loaded dataset\n"
            "job-000001 RUNNING step 1/3 loss 4.0000 100 tok/s ETA 0:00\n"
            "job-000001 RUNNING step 2/3 loss 3.0000 100 tok/s ETA 0:01\n"
            "job-000001 RUNNING step 3/3 loss 2.0000 100 tok/s ETA 0:00\n"
            "job-000001 SUCCEEDED: 3/3 steps, loss 4.0000 -> 2.0000, output "
            "/tmp/jobs/job-000001/model.safetensors\n");
}

TEST_F(CommandsTest, WatchOnATerminalRedrawsInPlace) {
  EXPECT_EQ(Run({"watch", "job-000001"}, /*tty=*/true), 0);
  EXPECT_THAT(out_.str(), HasSubstr("\rjob-000001 RUNNING step 1/3 loss 4.0000 100 tok/s ETA "
                                    "0:00\x1b[K\rjob-000001 RUNNING step 2/3"));
  EXPECT_THAT(out_.str(), HasSubstr("\x1b[K\njob-000001 SUCCEEDED: 3/3 steps"));
}

TEST_F(CommandsTest, WatchJsonIsOneCompactObjectPerStepStateAndEvent) {
  EXPECT_EQ(Run({"watch", "job-000001", "--json"}), 0);
  EXPECT_EQ(out_.str(),
            "{\"type\":\"state\",\"job\":\"job-000001\",\"state\":\"QUEUED\",\"reason\":\"\","
            "\"time_unix_ms\":1}\n"
            "{\"type\":\"state\",\"job\":\"job-000001\",\"state\":\"RUNNING\",\"reason\":\"\","
            "\"time_unix_ms\":2}\n"
            "{\"type\":\"event\",\"job\":\"job-000001\",\"text\":\"loaded dataset\"}\n"
            "{\"type\":\"step\",\"job\":\"job-000001\",\"step\":1,\"loss\":4,\"grad_norm\":0,"
            "\"lr\":0,\"tokens_per_s\":100,\"time_unix_ms\":1000}\n"
            "{\"type\":\"step\",\"job\":\"job-000001\",\"step\":2,\"loss\":3,\"grad_norm\":0,"
            "\"lr\":0,\"tokens_per_s\":100,\"time_unix_ms\":2000}\n"
            "{\"type\":\"step\",\"job\":\"job-000001\",\"step\":3,\"loss\":2,\"grad_norm\":0,"
            "\"lr\":0,\"tokens_per_s\":100,\"time_unix_ms\":3000}\n"
            "{\"type\":\"state\",\"job\":\"job-000001\",\"state\":\"SUCCEEDED\",\"reason\":\"\","
            "\"time_unix_ms\":3,\"step\":3,"
            "\"output\":\"/tmp/jobs/job-000001/model.safetensors\"}\n");
  EXPECT_THAT(out_.str(), Not(HasSubstr("\"spec\"")));
}

TEST_F(CommandsTest, WatchJsonKeepsQuietAndEvery) {
  EXPECT_EQ(Run({"watch", "job-000001", "--json", "--quiet"}), 0);
  EXPECT_THAT(out_.str(), Not(HasSubstr("\"type\":\"step\"")));
  EXPECT_THAT(out_.str(), Not(HasSubstr("\"type\":\"event\"")));
  EXPECT_THAT(out_.str(), HasSubstr("\"state\":\"SUCCEEDED\""));
  EXPECT_EQ(Run({"watch", "job-000001", "--json", "--every=2"}), 0);
  EXPECT_THAT(out_.str(), Not(HasSubstr("\"step\":1,")));
  EXPECT_THAT(out_.str(), HasSubstr("\"step\":2,"));
  EXPECT_THAT(out_.str(), HasSubstr("\"step\":3,"));
}

TEST_F(CommandsTest, SubmitWatchJsonPrintsTheJobThenCompactLines) {
  const std::string path = ::testing::TempDir() + "/good-json.json";
  std::ofstream(path) << "{\"steps\": 3}";
  EXPECT_EQ(Run({"submit", path, "--watch", "--json"}), 0);
  const std::vector<std::string> lines = absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 8u) << out_.str();     // the Job, 3 state changes, an event, 3 steps
  EXPECT_THAT(lines[0], HasSubstr("\"spec\""));  // submit --json: the whole Job
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_THAT(lines[i], Not(HasSubstr("\"spec\""))) << lines[i];
    EXPECT_THAT(lines[i], HasSubstr("\"type\":")) << lines[i];
  }
}

TEST_F(CommandsTest, VersionAndHelpNeedNoCoordinator) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"version"}, {"--version"}, {"help"}, {"help", "watch"}, {"watch", "--help"}}) {
    absl::StatusOr<Invocation> inv = ParseArguments(args, nullptr);
    ASSERT_TRUE(inv.ok()) << inv.status();
    EXPECT_FALSE(NeedsCoordinator(*inv)) << args[0];
    std::ostringstream out, err;
    Output output{out, err, false};
    EXPECT_EQ(RunWithoutCoordinator(*inv, output), 0) << args[0];
    EXPECT_EQ(err.str(), "") << args[0];
  }
  absl::StatusOr<Invocation> inv = ParseArguments({"--version"}, nullptr);
  std::ostringstream out, err;
  Output output{out, err, false};
  RunWithoutCoordinator(*inv, output);
  EXPECT_THAT(out.str(), HasSubstr("dtrain 0."));
  EXPECT_THAT(out.str(), HasSubstr("(commit "));
  inv = ParseArguments({"help", "watch"}, nullptr);
  out.str("");
  RunWithoutCoordinator(*inv, output);
  EXPECT_THAT(out.str(), HasSubstr("usage: dtrain [flags] watch JOB [--quiet] [--every=N]"));
}

TEST_F(CommandsTest, ACommandThatNeedsTheCoordinatorIsNotRunWithoutIt) {
  absl::StatusOr<Invocation> inv = ParseArguments({"list"}, nullptr);
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE(NeedsCoordinator(*inv));
  std::ostringstream out, err;
  Output output{out, err, false};
  EXPECT_EQ(RunWithoutCoordinator(*inv, output), 2);
  EXPECT_THAT(err.str(), HasSubstr("'list' needs the coordinator"));
}

TEST_F(CommandsTest, WatchReconnectsAfterTheLastStepSeen) {
  EXPECT_EQ(Run({"watch", "job-000009", "--reconnect_for=10s"}), 0);
  {
    absl::MutexLock lock(&fake_.mu);
    EXPECT_EQ(fake_.watch_after_steps, (std::vector<int64_t>{0, 2}));
  }
  // Each state change and each step once, although the second stream replayed the history.
  const std::string out = out_.str();
  EXPECT_EQ(out,
            "job-000009 QUEUED\n"
            "job-000009 RUNNING\n"
            "job-000009 event: loaded dataset\n"
            "job-000009 RUNNING step 1/3 loss 4.0000 100 tok/s ETA 0:00\n"
            "job-000009 RUNNING step 2/3 loss 3.0000 100 tok/s ETA 0:01\n"
            "job-000009 RUNNING step 3/3 loss 2.0000 100 tok/s ETA 0:00\n"
            "job-000009 SUCCEEDED: 3/3 steps, loss 4.0000 -> 2.0000, output "
            "/tmp/jobs/job-000009/model.safetensors\n");
  EXPECT_THAT(err_.str(), HasSubstr("reconnecting"));
}

// A long history is replayed to a log (a pipe), not to a terminal's one progress line nor to
// --quiet: those start at the newest step, the summary's first loss from GetJobSteps.
TEST_F(CommandsTest, WatchOfALongHistoryStartsAtItsNewestStepUnlessItIsALog) {
  EXPECT_EQ(Run({"watch", kLongJob, "--quiet"}), 5);  // CANCELLED
  EXPECT_THAT(out_.str(), HasSubstr("loss 9.0000 -> 1.5000"));
  out_.str("");
  EXPECT_EQ(Run({"watch", kLongJob}, /*tty=*/true), 5);
  EXPECT_THAT(out_.str(), HasSubstr("\rjob-000012 RUNNING step 20000/30000 loss 1.5000"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("step 19999/")));
  out_.str("");
  EXPECT_EQ(Run({"watch", kLongJob, "--every=10000"}), 5);  // piped: every step replayed
  EXPECT_THAT(out_.str(), HasSubstr("step 10000/30000"));
  absl::MutexLock lock(&fake_.mu);
  EXPECT_EQ(fake_.watch_after_steps, (std::vector<int64_t>{19999, 19999, 0}));
}

TEST_F(CommandsTest, WatchGivesUpAfterReconnectFor) {
  fake_.on_gone = [this] {
    stopper_ = std::thread([this] { server_->Shutdown(absl::ToChronoTime(absl::Now())); });
  };
  const absl::Time start = absl::Now();
  EXPECT_EQ(Run({"watch", "job-000010", "--reconnect_for=1s", "--timeout=1s"}), 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(6));
  EXPECT_THAT(out_.str(), HasSubstr("job-000010 RUNNING step 1/3"));
  EXPECT_THAT(err_.str(), HasSubstr("reconnecting for up to 1s"));
  EXPECT_THAT(err_.str(), HasSubstr("lost the coordinator at " + address_ + " for 1s"));
}

TEST_F(CommandsTest, CancelOfAnEndedJobExits0WithANote) {
  EXPECT_EQ(Run({"cancel", "job-000001", "--reason=not needed"}), 0);
  EXPECT_EQ(out_.str(), "job-000001 CANCELLED: not needed\n");
  EXPECT_EQ(Run({"cancel", "job-000002"}), 0);
  EXPECT_EQ(err_.str(),
            "dtrain: note: job-000002 already ended SUCCEEDED: 3/3 steps; nothing to cancel\n");
  EXPECT_EQ(out_.str(), "job-000002 SUCCEEDED\n");
}

TEST_F(CommandsTest, CancelTakesSeveralIdsAndTriesEvery) {
  EXPECT_EQ(Run({"cancel", "job-000007", "1"}), 4);  // the first failure's code
  EXPECT_THAT(err_.str(), HasSubstr("no job job-000007"));
  EXPECT_EQ(out_.str(), "job-000001 CANCELLED\n");
}

TEST(JobIdFromArgument, IdsAndNumbersButNotNames) {
  EXPECT_EQ(JobIdFromArgument("job-000012"), "job-000012");
  EXPECT_EQ(JobIdFromArgument("12"), "job-000012");
  EXPECT_EQ(JobIdFromArgument("job-12"), "job-000012");  // the coordinator's one spelling
  EXPECT_EQ(JobIdFromArgument("1234567"), "job-1234567");
  EXPECT_EQ(JobIdFromArgument("0"), std::nullopt);
  EXPECT_EQ(JobIdFromArgument("tiny"), std::nullopt);
  EXPECT_EQ(JobIdFromArgument("12b"), std::nullopt);
  EXPECT_EQ(JobIdFromArgument(""), std::nullopt);
}

TEST_F(CommandsTest, StatusTakesSeveralIdsNumbersAndNames) {
  EXPECT_EQ(Run({"status", "1", "job-000002"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("id:        job-000001\n"));
  EXPECT_THAT(out_.str(), HasSubstr("\n\nid:        job-000002\n"));
  EXPECT_EQ(Run({"status", "tiny", "--json"}), 0);  // only job-000001 is named tiny
  EXPECT_THAT(out_.str(), HasSubstr("\"id\":\"job-000001\""));
}

TEST_F(CommandsTest, ListEndsWithTheCommandForTheNextPage) {
  EXPECT_EQ(Run({"list", "--limit=2"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("job-000002"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("job-000001")));
  EXPECT_THAT(out_.str(), HasSubstr("older jobs: dtrain list --page=2 --limit=2\n"));
  EXPECT_EQ(Run({"list", "--limit=2", "--state=failed,succeeded"}), 0);
  EXPECT_THAT(out_.str(),
              HasSubstr("older jobs: dtrain list --page=2 --state=FAILED,SUCCEEDED --limit=2\n"));
  EXPECT_EQ(Run({"list"}), 0);
  EXPECT_THAT(out_.str(), Not(HasSubstr("older jobs")));
}

TEST_F(CommandsTest, AmbiguousNameListsTheMatchesAndExits2) {
  EXPECT_EQ(Run({"status", "twice"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("'twice' names 2 jobs: job-000003 (FAILED), "
                                    "job-000002 (SUCCEEDED); give one of their ids"));
}

TEST_F(CommandsTest, NotFoundNamesTheNewestJob) {
  EXPECT_EQ(Run({"status", "13"}), 4);
  EXPECT_THAT(err_.str(), HasSubstr("no job job-000013; the newest is job-000003 (dtrain list)"));
  EXPECT_EQ(Run({"watch", "nosuchname"}), 4);
  EXPECT_THAT(err_.str(), HasSubstr("no job with the id or name 'nosuchname'; the newest is "
                                    "job-000003"));
}

TEST_F(CommandsTest, ListPassesStates) {
  EXPECT_EQ(Run({"list", "--state=running,QUEUED"}), 0);
  absl::MutexLock lock(&fake_.mu);
  EXPECT_EQ(fake_.last_states, (std::vector<int>{RUNNING, QUEUED}));
}

TEST_F(CommandsTest, SubmitDashReadsStandardInputAndPrintsWarnings) {
  std::istringstream in("{\"steps\": 3, \"name\": \"big\"}");
  EXPECT_EQ(Run({"submit", "-"}, false, &in), 0);
  EXPECT_EQ(err_.str(), "warning: it needs 8 workers; 1 is registered\n");
  absl::MutexLock lock(&fake_.mu);
  EXPECT_EQ(fake_.last_submit.spec_json(), "{\"steps\": 3, \"name\": \"big\"}");
}

TEST_F(CommandsTest, SubmitEmptyFileOrDirectoryExits2SayingSo) {
  const std::string path = ::testing::TempDir() + "/empty.json";
  std::ofstream(path) << "  \n";
  EXPECT_EQ(Run({"submit", path}), 2);
  EXPECT_THAT(err_.str(), HasSubstr(path + ": file is empty"));
  EXPECT_EQ(Run({"submit", ::testing::TempDir()}), 2);
  EXPECT_THAT(err_.str(), HasSubstr(" is a directory, not a job spec file"));
  std::istringstream in("");
  EXPECT_EQ(Run({"submit", "-"}, false, &in), 2);
  EXPECT_THAT(err_.str(), HasSubstr("standard input: file is empty"));
}

TEST_F(CommandsTest, SubmitStopsReadingASpecLargerThan16MiB) {
  std::istringstream in(std::string((16 << 20) + 1, ' '));
  EXPECT_EQ(Run({"submit", "-"}, false, &in), 2);
  EXPECT_THAT(err_.str(), HasSubstr("standard input is larger than 16 MiB: not a job spec"));
  // A device that never ends is cut off, not read until memory runs out.
  EXPECT_EQ(Run({"plan", "/dev/zero"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("/dev/zero is larger than 16 MiB"));
}

// plan reads the spec with the coordinator's own parser, so this is submit's wording too.
TEST_F(CommandsTest, MalformedSpecNamesLineAndColumn) {
  const std::string path = ::testing::TempDir() + "/malformed.json";
  std::ofstream(path) << "{\n  \"name\": \"x\",\n  \"steps\": 10\n  \"batch_size\": 4\n}\n";
  EXPECT_EQ(Run({"plan", path}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("job spec is not valid JSON: line 4, column 3: expected ',' "
                                    "or '}' after a field's value, found '\"'"));
  std::ofstream(path) << "{\"name\": \"x\", \"steps\": 10,";
  EXPECT_EQ(Run({"plan", path}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("line 1, column 27: expected a field name in double quotes, "
                                    "found the end of the file"));
  std::ofstream(path) << "{\"name\": tiny}";
  EXPECT_EQ(Run({"plan", path}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("line 1, column 10: expected a value (a string needs double "
                                    "quotes), found 't'"));
}

TEST_F(CommandsTest, WatchQuietPrintsStateChangesAndTheSummaryOnly) {
  EXPECT_EQ(Run({"watch", "job-000001", "--quiet"}), 0);
  EXPECT_EQ(out_.str(),
            "job-000001 QUEUED\n"
            "job-000001 RUNNING\n"
            "job-000001 SUCCEEDED: 3/3 steps, loss 4.0000 -> 2.0000, output "
            "/tmp/jobs/job-000001/model.safetensors\n");
}

TEST_F(CommandsTest, WatchEveryPrintsEveryNthStepAndTheLast) {
  EXPECT_EQ(Run({"watch", "job-000001", "--every=2"}), 0);
  EXPECT_THAT(out_.str(), Not(HasSubstr("step 1/3")));
  EXPECT_THAT(out_.str(), HasSubstr("step 2/3"));
  EXPECT_THAT(out_.str(), HasSubstr("step 3/3"));
}

TEST_F(CommandsTest, WatchCallsOnWatchWithTheJobId) {
  std::string watched;
  on_watch_ = [&](const std::string& id) { watched = id; };
  EXPECT_EQ(Run({"watch", "1"}), 0);
  EXPECT_EQ(watched, "job-000001");
}

TEST_F(CommandsTest, ResubmitSendsTheSpecWithResumeAndSteps) {
  EXPECT_EQ(Run({"resubmit", "1", "--resume", "--steps=30"}), 0);
  EXPECT_EQ(out_.str(),
            "submitted job-000001 (tiny), a copy of job-000001 resuming from its "
            "last sealed step with steps 30: QUEUED: waiting for 1 idle worker\n");
  absl::MutexLock lock(&fake_.mu);
  EXPECT_TRUE(fake_.last_submit.spec_json().empty());
  EXPECT_EQ(fake_.last_submit.spec().resume_from(), "job-000001");
  EXPECT_EQ(fake_.last_submit.spec().steps(), 30);
  EXPECT_EQ(fake_.last_submit.spec().batch_size(), 2);  // the rest of the job's spec
}

TEST_F(CommandsTest, ResubmitOfAnUnknownJobExits4) {
  EXPECT_EQ(Run({"resubmit", "job-000042"}), 4);
  EXPECT_THAT(err_.str(), HasSubstr("no job job-000042"));
}

TEST_F(CommandsTest, LogsPrintsEveryLineOrOneRanks) {
  EXPECT_EQ(Run({"logs", "1"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr(" coordinator INFO placed on w1, w2\n"));
  EXPECT_THAT(out_.str(),
              HasSubstr(" rank 1 (w2) ERROR worker stopped by SIGTERM after step 20\n"));
  EXPECT_EQ(Run({"logs", "1", "--rank=1"}), 0);
  EXPECT_THAT(out_.str(), Not(HasSubstr("coordinator")));
  EXPECT_THAT(out_.str(), HasSubstr("rank 1 (w2) ERROR"));
  EXPECT_EQ(Run({"logs", "job-000005"}), 4);
}

TEST_F(CommandsTest, LogsShowsTheStateChangesInTimeOrderNamingWhoSaidEachLine) {
  EXPECT_EQ(Run({"logs", "2"}), 0);
  std::vector<std::string> lines = absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 5u) << out_.str();
  EXPECT_THAT(lines[0], HasSubstr(" coordinator INFO state QUEUED: reason 1000"));
  EXPECT_THAT(lines[1], HasSubstr(" coordinator INFO line 2000"));
  EXPECT_THAT(lines[2], HasSubstr(" coordinator INFO state RUNNING: reason 3000"));
  EXPECT_THAT(lines[3], HasSubstr(" rank 0 (w1) INFO line 4000"));
  EXPECT_THAT(lines[4], HasSubstr(" coordinator INFO state SUCCEEDED: reason 9000"));
  EXPECT_EQ(Run({"logs", "2", "--rank=0"}), 0);
  EXPECT_THAT(out_.str(), Not(HasSubstr("state "))) << "one rank's lines only";
}

TEST_F(CommandsTest, CheckpointsListsTheSealedSteps) {
  EXPECT_EQ(Run({"checkpoints", "1"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("job-000001 checkpoints: /ckpt/job-000001 on hostA, every 10 "
                                    "steps\nSTEP  SEALED  PATH\n10    -       "
                                    "/ckpt/job-000001/step_00000010\n"));
}

TEST_F(CommandsTest, WorkersForget) {
  EXPECT_EQ(Run({"workers", "--forget=w3"}), 0);
  EXPECT_EQ(out_.str(), "forgot worker w3\n");
  EXPECT_EQ(Run({"workers", "--forget=w1"}), 6);
  EXPECT_THAT(err_.str(), HasSubstr("w1 is IDLE, not LOST"));
  EXPECT_EQ(Run({"workers", "--forget=w9"}), 4);
}

TEST(CommandsUnreachable, NothingListeningExits3Quickly) {
  // A port that was just free: bind, read the port, close.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  close(fd);

  for (const std::string command : {"list", "workers", "watch"}) {
    std::vector<std::string> args = {command, "--coordinator=127.0.0.1:" + std::to_string(port)};
    if (command == "watch") args.push_back("job-000001");
    absl::StatusOr<Invocation> inv = ParseArguments(args, nullptr);
    ASSERT_TRUE(inv.ok());
    auto stub = CoordinatorStub::Connect(inv->coordinator, StubOptions{});
    std::ostringstream out, err;
    Output output{out, err, false};
    const absl::Time start = absl::Now();
    EXPECT_EQ(RunInvocation(*inv, *stub, output), 3) << command;
    EXPECT_LT(absl::Now() - start, absl::Seconds(3)) << command;
    EXPECT_THAT(err.str(), HasSubstr("cannot reach the coordinator at 127.0.0.1:")) << command;
  }
}

}  // namespace
}  // namespace client
}  // namespace dtrain
