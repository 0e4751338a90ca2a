// The service over real gRPC on 127.0.0.1:0, with the test playing the workers and the user.
#include "coordinator/coordinator_service.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_limits.h"
#include "common/grpc_status.h"
#include "coordinator/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Duration kLease = absl::Milliseconds(300);

constexpr const char* kSpec = kTinySpec;

// A coordinator (store, manager, service, server) in this process.
class Coordinator {
 public:
  // `tweak` adjusts the manager's options (a fake clock) before each Start.
  explicit Coordinator(const std::string& db,
                       std::function<void(JobManager::Options*)> tweak = nullptr)
      : db_(db), tweak_(std::move(tweak)) {
    Start();
  }
  ~Coordinator() { Stop(); }

  void Start() {
    auto store = JobStore::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    JobManager::Options options;
    options.lease = kLease;
    options.heartbeat_interval = absl::Milliseconds(50);
    options.log = [](absl::string_view) {};
    if (tweak_) tweak_(&options);
    auto manager = JobManager::Create(std::move(*store), options);
    ASSERT_TRUE(manager.ok()) << manager.status();
    manager_ = std::move(*manager);
    service_ = std::make_unique<CoordinatorService>(manager_.get());
    auto server = StartServer("127.0.0.1:0", service_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    manager_->Start();
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_.port),
                                   grpc::InsecureChannelCredentials());
    stub_ = dtrain::Coordinator::NewStub(channel_);
  }

  void Stop() {
    if (server_.server == nullptr) return;
    service_->Shutdown();
    server_.server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    server_.server->Wait();
    server_.server.reset();
    manager_->Stop();
    manager_.reset();
  }

  dtrain::Coordinator::Stub& stub() { return *stub_; }
  int port() const { return server_.port; }

  absl::StatusOr<Job> Submit(const std::string& json) {
    SubmitJobRequest request;
    request.set_spec_json(json);
    SubmitJobResponse response;
    grpc::Status status = stub_->SubmitJob(Ctx().get(), request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response.job();
  }
  absl::StatusOr<Job> Get(const std::string& id) {
    GetJobRequest request;
    request.set_job_id(id);
    Job job;
    grpc::Status status = stub_->GetJob(Ctx().get(), request, &job);
    if (!status.ok()) return FromGrpcStatus(status);
    return job;
  }
  JobState StateOf(const std::string& id) {
    absl::StatusOr<Job> job = Get(id);
    return job.ok() ? job->state() : JOB_STATE_UNSPECIFIED;
  }

 private:
  std::string db_;
  std::function<void(JobManager::Options*)> tweak_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<CoordinatorService> service_;
  RunningServer server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<dtrain::Coordinator::Stub> stub_;
};

// A worker driven by the test.
class FakeWorker {
 public:
  FakeWorker(dtrain::Coordinator::Stub* stub, std::string id)
      : stub_(stub), id_(std::move(id)), session_(id_ + "-session") {}

  grpc::Status Register(const std::string& running = "") {
    RegisterWorkerRequest request;
    request.set_worker_id(id_);
    request.set_session_id(session_);
    request.set_address(id_ + ":7071");
    request.set_host_label("host-a");
    request.mutable_device()->set_kind("cpu");
    request.set_running_job_id(running);
    RegisterWorkerResponse response;
    return stub_->RegisterWorker(Ctx().get(), request, &response);
  }
  HeartbeatResponse Beat() {
    HeartbeatRequest request;
    request.set_worker_id(id_);
    request.set_session_id(session_);
    request.set_running_job_id(running_);
    HeartbeatResponse response;
    grpc::Status status = stub_->Heartbeat(Ctx().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (response.has_assignment()) running_ = response.assignment().job_id();
    for (const std::string& id : response.cancel_job_ids()) {
      if (id == running_) running_.clear();
    }
    return response;
  }
  // Heartbeats until an assignment arrives (bounded), then reports it running.
  std::string TakeAssignment() {
    std::string job;
    WaitFor([&] {
      HeartbeatResponse r = Beat();
      if (r.has_assignment()) job = r.assignment().job_id();
      return !job.empty();
    });
    Beat();
    return job;
  }
  grpc::Status Report(const ReportProgressRequest& partial, ReportProgressResponse* response) {
    ReportProgressRequest request = partial;
    request.set_worker_id(id_);
    request.set_session_id(session_);
    request.set_job_id(running_);
    return stub_->ReportProgress(Ctx().get(), request, response);
  }
  grpc::Status Step(int64_t step, double loss) {
    ReportProgressRequest r;
    r.mutable_step()->set_step(step);
    r.mutable_step()->set_loss(loss);
    r.mutable_step()->set_tokens_per_s(1000);
    ReportProgressResponse response;
    return Report(r, &response);
  }
  grpc::Status Finish(bool ok, const std::string& text) {
    ReportProgressRequest r;
    r.mutable_outcome()->set_succeeded(ok);
    (ok ? r.mutable_outcome()->mutable_output() : r.mutable_outcome()->mutable_error())
        ->assign(text);
    ReportProgressResponse response;
    grpc::Status status = Report(r, &response);
    running_.clear();
    return status;
  }
  const std::string& running() const { return running_; }

 private:
  dtrain::Coordinator::Stub* stub_;
  std::string id_, session_, running_;
};

// Reads a whole WatchJob stream on a thread.
class Watcher {
 public:
  Watcher(dtrain::Coordinator::Stub* stub, const std::string& job_id, int64_t after_step = 0,
          absl::Duration timeout = absl::Seconds(20)) {
    context_ = Ctx(timeout);
    WatchJobRequest request;
    request.set_job_id(job_id);
    request.set_after_step(after_step);
    thread_ = std::thread([this, stub, request] {
      auto reader = stub->WatchJob(context_.get(), request);
      JobUpdate update;
      while (reader->Read(&update)) {
        absl::MutexLock lock(&mu_);
        updates_.push_back(update);
      }
      status_ = reader->Finish();
    });
  }
  // Waits for the stream to end; its status.
  grpc::Status Join() {
    thread_.join();
    return status_;
  }
  void Cancel() { context_->TryCancel(); }
  // Waits (up to 10 s) until an update satisfies `done`; whether one did.
  bool WaitFor(const std::function<bool(const JobUpdate&)>& done) {
    absl::MutexLock lock(&mu_);
    auto seen = [&] {
      for (const JobUpdate& u : updates_) {
        if (done(u)) return true;
      }
      return false;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(10));
  }
  // "QUEUED", "step 1", "event ...", one string per update.
  std::vector<std::string> Summary() const {
    std::vector<std::string> out;
    for (const JobUpdate& u : updates_) {
      if (u.has_state_change()) out.push_back(JobState_Name(u.state_change().state()));
      if (u.has_step()) out.push_back(absl::StrCat("step ", u.step().step()));
      if (u.update_case() == JobUpdate::kEvent) out.push_back("event");
    }
    return out;
  }
  const std::vector<JobUpdate>& updates() const { return updates_; }

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<JobUpdate> updates_;  // written by thread_ under mu_; read after Join
  grpc::Status status_;
};

// Drops event updates, which depend on placement details.
std::vector<std::string> WithoutEvents(std::vector<std::string> s) {
  s.erase(std::remove(s.begin(), s.end(), "event"), s.end());
  return s;
}

TEST(CoordinatorService, BadSpecIsInvalidArgumentListingEveryProblem) {
  Coordinator c(TempDb("svc-bad"));
  absl::StatusOr<Job> job = c.Submit(R"({"steps": -1, "batch_size": 3, "parallel": {"dp": 2},
      "model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 4, "n_embd": 30}})");
  ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              AllOf(HasSubstr("model.n_head=4 does not divide n_embd=30"),
                    HasSubstr("steps=-1 must be positive"), HasSubstr("dataset is required"),
                    HasSubstr("batch_size=3 is not divisible by parallel.dp=2")));
  job = c.Submit(R"({"steps": 1, "optimiser": {}})");
  ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("unknown field \"optimiser\""));
  EXPECT_EQ(c.Submit("{\"steps\": ").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CoordinatorService, JobRunsToSuccessAndTheWatchSeesEverything) {
  Coordinator c(TempDb("svc-happy"));
  absl::StatusOr<Job> job = c.Submit(kSpec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), QUEUED);
  EXPECT_EQ(job->reason(), "waiting for 1 idle worker; 0 idle, 0 busy, 0 lost");

  Watcher watch(&c.stub(), job->id());
  FakeWorker w1(&c.stub(), "w1");
  ASSERT_TRUE(w1.Register().ok());
  ASSERT_EQ(w1.TakeAssignment(), job->id());
  ASSERT_TRUE(WaitFor([&] { return c.StateOf(job->id()) == RUNNING; }));
  for (int step = 1; step <= 3; ++step) ASSERT_TRUE(w1.Step(step, 5.0 - step).ok());
  ASSERT_TRUE(w1.Finish(true, "/runs/model.safetensors").ok());

  grpc::Status status = watch.Join();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(WithoutEvents(watch.Summary()), ElementsAre("QUEUED", "PLACING", "RUNNING", "step 1",
                                                          "step 2", "step 3", "SUCCEEDED"));
  ASSERT_FALSE(watch.updates().empty());
  const JobUpdate& last = watch.updates().back();
  EXPECT_EQ(last.job().state(), SUCCEEDED);
  EXPECT_EQ(last.job().output(), "/runs/model.safetensors");
  EXPECT_EQ(last.job().latest().step(), 3);
  EXPECT_EQ(last.job().placement().ranks_size(), 1);  // state changes carry the placement
  for (const JobUpdate& u : watch.updates()) {
    if (u.has_step()) {
      EXPECT_EQ(u.job().placement().ranks_size(), 0);  // steps do not
    }
  }

  // A late watcher gets the replay (from step 2 on) and the end at once.
  Watcher replay(&c.stub(), job->id(), /*after_step=*/2);
  EXPECT_TRUE(replay.Join().ok());
  EXPECT_THAT(WithoutEvents(replay.Summary()),
              ElementsAre("QUEUED", "PLACING", "RUNNING", "step 3", "SUCCEEDED"));

  ListJobsResponse list;
  ASSERT_TRUE(c.stub().ListJobs(Ctx().get(), ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).state(), SUCCEEDED);
}

TEST(CoordinatorService, ThePeerSecretGoesToTheWorkersAndToNoClient) {
  Coordinator c(TempDb("svc-secret"));
  FakeWorker w1(&c.stub(), "w1");
  ASSERT_TRUE(w1.Register().ok());
  absl::StatusOr<Job> job = c.Submit(kSpec);
  ASSERT_TRUE(job.ok()) << job.status();
  Watcher watch(&c.stub(), job->id());  // after the submit: before it, NOT_FOUND
  std::string secret;
  ASSERT_TRUE(WaitFor([&] {
    HeartbeatResponse r = w1.Beat();
    secret = r.assignment().placement().peer_secret();
    return r.has_assignment();
  }));
  EXPECT_EQ(secret.size(), 16u);  // the worker has it
  w1.Beat();
  ASSERT_TRUE(WaitFor([&] { return c.StateOf(job->id()) == RUNNING; }));
  // Clients see the placement, never the secret: GetJob, ListJobs, WatchJob, CancelJob.
  absl::StatusOr<Job> got = c.Get(job->id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->placement().ranks_size(), 1);
  std::vector<std::string> seen = {got->SerializeAsString()};
  ListJobsResponse list;
  ASSERT_TRUE(c.stub().ListJobs(Ctx().get(), ListJobsRequest(), &list).ok());
  seen.push_back(list.SerializeAsString());
  CancelJobRequest cancel;
  cancel.set_job_id(job->id());
  Job cancelled;
  ASSERT_TRUE(c.stub().CancelJob(Ctx().get(), cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.placement().ranks_size(), 1);
  seen.push_back(cancelled.SerializeAsString());
  ASSERT_TRUE(watch.Join().ok());
  for (const JobUpdate& u : watch.updates()) seen.push_back(u.SerializeAsString());
  for (const std::string& bytes : seen) {
    EXPECT_EQ(bytes.find(secret), std::string::npos);
  }
}

TEST(CoordinatorService, CancelStopsTheWorkerAndEndsTheWatch) {
  Coordinator c(TempDb("svc-cancel"));
  FakeWorker w1(&c.stub(), "w1");
  ASSERT_TRUE(w1.Register().ok());
  absl::StatusOr<Job> job = c.Submit(kSpec);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(w1.TakeAssignment(), job->id());
  Watcher watch(&c.stub(), job->id());
  CancelJobRequest cancel;
  cancel.set_job_id(job->id());
  cancel.set_reason("testing");
  Job cancelled;
  ASSERT_TRUE(c.stub().CancelJob(Ctx().get(), cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), CANCELLED);
  EXPECT_TRUE(watch.Join().ok());
  EXPECT_EQ(watch.Summary().back(), "CANCELLED");
  // The worker hears it in its next heartbeat.
  EXPECT_THAT(w1.Beat().cancel_job_ids(), ElementsAre(job->id()));
  EXPECT_EQ(w1.running(), "");
  // Cancelling again is a precondition failure.
  grpc::Status again = c.stub().CancelJob(Ctx().get(), cancel, &cancelled);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(CoordinatorService, AWatchOfAQueuedJobFollowsItsPlaceInTheQueue) {
  Coordinator c(TempDb("svc-queue-place"));
  absl::StatusOr<Job> first = c.Submit(kSpec);  // no worker: both wait
  absl::StatusOr<Job> second = c.Submit(kSpec);
  ASSERT_TRUE(first.ok() && second.ok());
  Watcher watch(&c.stub(), second->id());
  auto place = [](int position) {
    return [position](const JobUpdate& u) {
      return u.update_case() == JobUpdate::UPDATE_NOT_SET && u.job().queue_position() == position;
    };
  };
  ASSERT_TRUE(watch.WaitFor(place(2)));
  CancelJobRequest cancel;
  cancel.set_job_id(first->id());
  Job cancelled;
  ASSERT_TRUE(c.stub().CancelJob(Ctx().get(), cancel, &cancelled).ok());
  // The scheduler pass after the cancel wakes the watch: "next in the queue".
  ASSERT_TRUE(watch.WaitFor(place(1)));
  cancel.set_job_id(second->id());
  ASSERT_TRUE(c.stub().CancelJob(Ctx().get(), cancel, &cancelled).ok());
  ASSERT_TRUE(watch.Join().ok());
  std::vector<std::string> seen;
  for (const JobUpdate& u : watch.updates()) {
    if (u.update_case() == JobUpdate::kEvent) continue;  // the submit's warnings
    seen.push_back(u.has_state_change() ? JobState_Name(u.state_change().state())
                                        : absl::StrCat("place ", u.job().queue_position()));
  }
  EXPECT_THAT(seen, ElementsAre("QUEUED", "place 2", "place 1", "CANCELLED"));
}

TEST(CoordinatorService, LeaseExpiryFailsTheJobNamingTheWorker) {
  Coordinator c(TempDb("svc-lease"));
  FakeWorker w1(&c.stub(), "w1");
  ASSERT_TRUE(w1.Register().ok());
  absl::StatusOr<Job> job = c.Submit(kSpec);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(w1.TakeAssignment(), job->id());
  ASSERT_TRUE(WaitFor([&] { return c.StateOf(job->id()) == RUNNING; }));
  Watcher watch(&c.stub(), job->id());
  // The worker goes silent.
  ASSERT_TRUE(WaitFor([&] { return c.StateOf(job->id()) == FAILED; }, absl::Seconds(3)));
  absl::StatusOr<Job> failed = c.Get(job->id());
  ASSERT_TRUE(failed.ok());
  EXPECT_THAT(failed->reason(), HasSubstr("worker w1 (dp0 pp0 tp0) lost: no heartbeat for 0."));
  EXPECT_TRUE(watch.Join().ok());
  EXPECT_EQ(watch.Summary().back(), "FAILED");
  ListWorkersResponse workers;
  ASSERT_TRUE(c.stub().ListWorkers(Ctx().get(), ListWorkersRequest(), &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).state(), LOST);
}

// On the manager's clock, which the test moves: the lease is the promise (refused up to its
// last instant, free just after), whatever the machine's load does to the real time between
// the calls. A fake clock also turns off the pause detector, which would (rightly) extend the
// lease when this process stalls for longer than a tick under load.
TEST(CoordinatorService, DuplicateWorkerIdIsAlreadyExists) {
  absl::Mutex mu;
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const auto clock = [&] {
    absl::MutexLock lock(&mu);
    return now;
  };
  const auto advance = [&](absl::Duration d) {
    absl::MutexLock lock(&mu);
    now += d;
  };
  Coordinator c(TempDb("svc-dup"), [&](JobManager::Options* o) { o->clock = clock; });
  FakeWorker first(&c.stub(), "w1");
  ASSERT_TRUE(first.Register().ok());
  RegisterWorkerRequest request;
  request.set_worker_id("w1");
  request.set_session_id("another-process");
  RegisterWorkerResponse response;
  grpc::Status status = c.stub().RegisterWorker(Ctx().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(status.error_message(), HasSubstr("w1"));
  advance(kLease);  // the lease's last instant: still held
  status = c.stub().RegisterWorker(Ctx().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  // Once the first one's lease runs out, the id is free.
  advance(absl::Milliseconds(1));
  EXPECT_TRUE(c.stub().RegisterWorker(Ctx().get(), request, &response).ok());
  EXPECT_EQ(response.lease_ms(), 300);
  EXPECT_EQ(response.heartbeat_interval_ms(), 50);
}

TEST(CoordinatorService, UnknownJobsAreNotFound) {
  Coordinator c(TempDb("svc-notfound"));
  EXPECT_EQ(c.Get("job-000042").status().code(), absl::StatusCode::kNotFound);
  Watcher watch(&c.stub(), "job-000042");
  EXPECT_EQ(watch.Join().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(CoordinatorService, WatchEndsAtTheClientsDeadline) {
  Coordinator c(TempDb("svc-deadline"));
  absl::StatusOr<Job> job = c.Submit(kSpec);
  ASSERT_TRUE(job.ok());
  Watcher watch(&c.stub(), job->id(), 0, absl::Milliseconds(300));
  EXPECT_EQ(watch.Join().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(watch.Summary().front(), "QUEUED");
  Watcher cancelled(&c.stub(), job->id());
  absl::SleepFor(absl::Milliseconds(100));
  cancelled.Cancel();
  EXPECT_EQ(cancelled.Join().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(c.StateOf(job->id()), QUEUED);  // the service is unharmed
}

// Watches cancelled at every moment while a job reports steps as fast as it can: a step's
// notification and a cancel race on every stream, and the service survives each one (a write
// issued after the cancel's Finish once reached gRPC's freed stream: "pure virtual method called").
TEST(CoordinatorService, WatchesCancelledWhileStepsArriveEndCleanly) {
  Coordinator c(TempDb("svc-watch-race"));
  FakeWorker w1(&c.stub(), "w1");
  ASSERT_TRUE(w1.Register().ok());
  absl::StatusOr<Job> job = c.Submit(kSpec);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(w1.TakeAssignment(), job->id());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> latest{0};
  std::thread steps([&] {
    for (int64_t step = 1; !stop.load(); ++step) {
      if (!w1.Step(step, 1.0).ok()) break;
      latest = step;
    }
  });
  std::vector<std::thread> watchers;
  int ended = 0;
  absl::Mutex mu;
  for (int t = 0; t < 4; ++t) {
    watchers.emplace_back([&, t] {
      for (int i = 0; i < 250; ++i) {
        auto context = Ctx(absl::Seconds(10));
        WatchJobRequest request;
        request.set_job_id(job->id());
        request.set_after_step(latest.load());  // caught up: parked until the next step
        auto reader = c.stub().WatchJob(context.get(), request);
        JobUpdate update;
        while (reader->Read(&update) && !update.has_step()) {
        }
        context->TryCancel();  // while the next step's notification may be on its way
        while (reader->Read(&update)) {
        }
        reader->Finish();
        absl::MutexLock lock(&mu);
        ++ended;
      }
    });
  }
  for (std::thread& t : watchers) t.join();
  stop = true;
  steps.join();
  EXPECT_EQ(ended, 1000);
  EXPECT_EQ(c.StateOf(job->id()), RUNNING);  // the service is unharmed
}

// A long job's curve in one answer: GetJobSteps thins 5,000 steps to about 400 (its rule has
// its own tests, step_thinning_test.cc), and a window of them comes whole.
TEST(CoordinatorService, GetJobStepsThinsALongHistoryAndGivesAWindowWhole) {
  Coordinator c(TempDb("svc-steps"));
  FakeWorker w1(&c.stub(), "w1");
  ASSERT_TRUE(w1.Register().ok());
  absl::StatusOr<Job> job = c.Submit(kSpec);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(w1.TakeAssignment(), job->id());
  for (int64_t first = 1; first <= 5000; first += kMaxStepRun) {
    ReportProgressRequest run;
    for (int64_t step = first; step < first + kMaxStepRun && step <= 5000; ++step) {
      StepMetrics* m = run.mutable_steps()->add_steps();
      m->set_step(step);
      m->set_loss(step == 4321 ? 50 : 2);
      m->set_tokens_per_s(1000);
    }
    ReportProgressResponse response;
    ASSERT_TRUE(w1.Report(run, &response).ok());
  }
  auto ask = [&](const std::string& id, int64_t after, int64_t until, int max,
                 GetJobStepsResponse* response) {
    GetJobStepsRequest request;
    request.set_job_id(id);
    request.set_after_step(after);
    request.set_until_step(until);
    request.set_max_steps(max);
    return c.stub().GetJobSteps(Ctx().get(), request, response);
  };
  GetJobStepsResponse thinned;
  ASSERT_TRUE(ask(job->id(), 0, 0, 400, &thinned).ok());
  EXPECT_EQ(thinned.recorded(), 5000);
  EXPECT_LE(thinned.steps_size(), 402);
  EXPECT_EQ(thinned.steps(0).step(), 1);
  EXPECT_EQ(thinned.steps(thinned.steps_size() - 1).step(), 5000);
  EXPECT_TRUE(std::any_of(thinned.steps().begin(), thinned.steps().end(),
                          [](const StepMetrics& m) { return m.step() == 4321 && m.loss() == 50; }));
  GetJobStepsResponse window;
  ASSERT_TRUE(ask(job->id(), 4000, 4300, 400, &window).ok());
  EXPECT_EQ(window.recorded(), 300);
  ASSERT_EQ(window.steps_size(), 300);
  EXPECT_EQ(window.steps(0).step(), 4001);
  GetJobStepsResponse none;
  EXPECT_EQ(ask("job-999999", 0, 0, 0, &none).error_code(), grpc::StatusCode::NOT_FOUND);
  const grpc::Status too_many = ask(job->id(), 0, 0, kMaxThinnedSteps + 1, &none);
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_many.error_message(), HasSubstr("max_steps 20001 is outside"));
}

TEST(CoordinatorService, TooManyWatchesFromOneClientAreResourceExhausted) {
  Coordinator c(TempDb("svc-watch-cap"));
  absl::StatusOr<Job> job = c.Submit(kSpec);  // stays QUEUED: no worker
  ASSERT_TRUE(job.ok());
  WatchJobRequest request;
  request.set_job_id(job->id());
  struct Open {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<JobUpdate>> reader;
  };
  // A watch that got its first update (the QUEUED state) is open on the server.
  auto open = [&](Open* w) {
    w->context = Ctx(absl::Seconds(20));
    w->reader = c.stub().WatchJob(w->context.get(), request);
    JobUpdate first;
    return w->reader->Read(&first);
  };
  std::vector<Open> watches(16);  // the default --max_watches_per_client
  for (Open& w : watches) ASSERT_TRUE(open(&w));
  Open refused;
  EXPECT_FALSE(open(&refused));
  const grpc::Status status = refused.reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(),
            "too many watches from this client (16 open); close some or raise "
            "--max_watches_per_client");
  // Closing one makes room (the server frees it when the stream is done).
  watches[0].context->TryCancel();
  watches[0].reader->Finish();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  bool reopened = false;
  while (!reopened && absl::Now() < deadline) {
    reopened = open(&watches[0]);
    if (reopened) break;
    watches[0].reader->Finish();
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(reopened);
  for (Open& w : watches) w.context->TryCancel();
  for (Open& w : watches) w.reader->Finish();
  EXPECT_EQ(c.StateOf(job->id()), QUEUED);  // the service is unharmed
}

TEST(CoordinatorService, AMessageOverTheCapIsRefusedAndNothingElse) {
  Coordinator c(TempDb("svc-message-cap"));
  SubmitJobRequest request;
  request.set_spec_json(std::string(kMaxCoordinatorMessageBytes + 1, ' '));
  SubmitJobResponse response;
  const grpc::Status status = c.stub().SubmitJob(Ctx().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  // Below the message cap, the spec's own cap (--max_spec_bytes) answers, in words.
  request.set_spec_json(std::string((1 << 20) + 1, ' '));
  EXPECT_THAT(c.Submit(request.spec_json()).status().message(), HasSubstr("--max_spec_bytes"));
  EXPECT_TRUE(c.Submit(kSpec).ok());  // the service is unharmed
}

TEST(CoordinatorService, ShutdownEndsOpenWatches) {
  Coordinator c(TempDb("svc-shutdown"));
  absl::StatusOr<Job> job = c.Submit(kSpec);
  ASSERT_TRUE(job.ok());
  Watcher watch(&c.stub(), job->id());
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  c.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(watch.Join().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(CoordinatorService, RestartKeepsHistoryAndQueuedJobs) {
  const std::string db = TempDb("svc-restart");
  std::string done_id, queued_id;
  {
    Coordinator c(db);
    FakeWorker w1(&c.stub(), "w1");
    ASSERT_TRUE(w1.Register().ok());
    absl::StatusOr<Job> done = c.Submit(kSpec);
    ASSERT_TRUE(done.ok());
    done_id = done->id();
    ASSERT_EQ(w1.TakeAssignment(), done_id);
    ASSERT_TRUE(w1.Step(1, 4.0).ok());
    ASSERT_TRUE(w1.Finish(true, "/out").ok());
    absl::StatusOr<Job> queued = c.Submit(absl::StrCat(
        R"({"parallel": {"dp": 4}, )"
        R"("checkpoint": {"dir": "/c"}, "dataset": "/d", "steps": 1, "batch_size": 4,)",
        R"("model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 2,)",
        R"("n_embd": 32}})"));
    ASSERT_TRUE(queued.ok());
    queued_id = queued->id();
  }
  Coordinator c(db);  // same database, new process state
  absl::StatusOr<Job> done = c.Get(done_id);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), SUCCEEDED);
  EXPECT_EQ(done->history_size(), 4);
  EXPECT_EQ(done->latest().step(), 1);
  absl::StatusOr<Job> queued = c.Get(queued_id);
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(queued->state(), QUEUED);
  EXPECT_THAT(queued->reason(), HasSubstr("waiting for 4 idle workers"));
  Watcher replay(&c.stub(), done_id);
  EXPECT_TRUE(replay.Join().ok());
  EXPECT_THAT(WithoutEvents(replay.Summary()),
              ElementsAre("QUEUED", "PLACING", "RUNNING", "step 1", "SUCCEEDED"));
}

// `call`'s answers for a job queued and then running on one worker (a FakeWorker).
struct QueuedThenRunning {
  std::string id;
  grpc::Status queued, running;
};
QueuedThenRunning CallQueuedThenRunning(
    Coordinator& c, const std::function<grpc::Status(const std::string&)>& call) {
  QueuedThenRunning out;
  absl::StatusOr<Job> job = c.Submit(kSpec);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return out;
  out.id = job->id();
  out.queued = call(out.id);
  FakeWorker w1(&c.stub(), "w1");
  EXPECT_TRUE(w1.Register().ok());
  EXPECT_EQ(w1.TakeAssignment(), out.id);
  EXPECT_TRUE(WaitFor([&] { return c.StateOf(out.id) == RUNNING; }));
  out.running = call(out.id);
  return out;
}

// What Diagnose cannot ask is named: an unknown job, a job with no run now, a one-worker run
// (no peer service). The answer of a running multi-worker job is the integration case diagnose.
TEST(CoordinatorService, DiagnoseRefusesJobsWithoutRanksToAsk) {
  Coordinator c(TempDb("svc-diagnose"));
  auto diagnose = [&](const std::string& id) {
    DiagnoseJobRequest request;
    request.set_job_id(id);
    JobDiagnosis response;
    return c.stub().Diagnose(Ctx().get(), request, &response);
  };
  EXPECT_EQ(diagnose("job-000042").error_code(), grpc::StatusCode::NOT_FOUND);
  const QueuedThenRunning r = CallQueuedThenRunning(c, diagnose);
  EXPECT_EQ(r.queued.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(r.queued.error_message(), HasSubstr(r.id + " is QUEUED"));
  EXPECT_EQ(r.running.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(r.running.error_message(), HasSubstr("runs on one worker"));
}

// TraceJob refuses what Diagnose refuses (the gathering is the same); a running job's trace is
// the integration case trace.
TEST(CoordinatorService, TraceJobRefusesJobsWithoutRanksToAsk) {
  Coordinator c(TempDb("svc-trace"));
  auto trace = [&](const std::string& id) {
    TraceJobRequest request;
    request.set_job_id(id);
    request.set_step(3);
    JobTrace response;
    return c.stub().TraceJob(Ctx().get(), request, &response);
  };
  EXPECT_EQ(trace("job-000042").error_code(), grpc::StatusCode::NOT_FOUND);
  absl::StatusOr<Job> job = c.Submit(kSpec);
  ASSERT_TRUE(job.ok()) << job.status();
  grpc::Status queued = trace(job->id());
  EXPECT_EQ(queued.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(queued.error_message(), HasSubstr(job->id() + " is QUEUED"));
}

// RebalanceJob (`dtrain rebalance`) names what it cannot re-cut; a running pipeline re-cut from
// its measured stages is rebalance_job_test (the manager) and the integration case
// rebalance_command (the CLI on real workers).
TEST(CoordinatorService, RebalanceJobRefusesWhatItCannotRecut) {
  Coordinator c(TempDb("svc-rebalance"));
  auto rebalance = [&](const std::string& id) {
    RebalanceJobRequest request;
    request.set_job_id(id);
    RebalanceJobResponse response;
    return c.stub().RebalanceJob(Ctx().get(), request, &response);
  };
  EXPECT_EQ(rebalance("").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(rebalance("job-000042").error_code(), grpc::StatusCode::NOT_FOUND);
  const QueuedThenRunning r = CallQueuedThenRunning(c, rebalance);
  EXPECT_EQ(r.queued.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(r.queued.error_message(), HasSubstr(r.id + " is QUEUED"));
  EXPECT_EQ(r.running.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(r.running.error_message(), HasSubstr("no straggler window scored yet"));
}

TEST(CoordinatorService, SecondServerOnTheSamePortFails) {
  Coordinator c(TempDb("svc-port"));
  auto store = JobStore::Open(TempDb("svc-port-2"));
  ASSERT_TRUE(store.ok());
  auto manager = JobManager::Create(std::move(*store), JobManager::Options());
  ASSERT_TRUE(manager.ok());
  CoordinatorService service(manager->get());
  auto server = StartServer(absl::StrCat("127.0.0.1:", c.port()), &service);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(server.status().message(), HasSubstr("cannot listen on 127.0.0.1:"));
}

}  // namespace
}  // namespace dtrain::coordinator
