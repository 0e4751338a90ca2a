// The coordinator's metrics end to end: a coordinator in this process (store, manager, gRPC
// service with the RPC interceptor) and its /metrics endpoint on loopback; the test plays a
// worker and a user, then scrapes, checks the numbers and runs promtool over the page.
#include "coordinator/coordinator_metrics.h"

#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/metrics/http_exporter.h"
#include "common/metrics/registry.h"
#include "common/metrics/testing.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_store.h"
#include "coordinator/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The value of the sample whose series is exactly `series` ("name{a=\"x\"}"); NaN when absent.
double Sample(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double value;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
    }
  }
  return std::nan("");
}

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto metrics = CoordinatorMetrics::Create(&registry_);
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = std::move(*metrics);
    auto store = JobStore::Open(TempDb("coordinator_metrics"));
    ASSERT_TRUE(store.ok()) << store.status();
    JobManager::Options options;
    options.lease = absl::Seconds(10);  // the test's worker beats only when it needs to
    options.heartbeat_interval = absl::Seconds(1);
    options.tick = absl::Milliseconds(10);
    options.log = [](absl::string_view) {};
    options.metrics = metrics_.get();
    auto manager = JobManager::Create(std::move(*store), options);
    ASSERT_TRUE(manager.ok()) << manager.status();
    manager_ = std::move(*manager);
    service_ = std::make_unique<CoordinatorService>(manager_.get());
    auto server = StartServer("127.0.0.1:0", service_.get(), metrics_->NewRpcInterceptorFactory());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    manager_->Start();
    auto http = metrics::MetricsServer::Start("127.0.0.1:0", &registry_);
    ASSERT_TRUE(http.ok()) << http.status();
    http_ = std::move(*http);
    stub_ = dtrain::Coordinator::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_.port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    http_.reset();
    service_->Shutdown();
    server_.server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    server_.server->Wait();
    manager_.reset();
  }

  std::string Scrape() {
    auto response = metrics::testing::HttpRequest(http_->port(), "/metrics");
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return "";
    EXPECT_EQ(response->code, 200);
    return response->body;
  }

  grpc::Status Register(const std::string& worker) {
    RegisterWorkerRequest request;
    request.set_worker_id(worker);
    request.set_session_id(worker + "-session");
    request.set_address(worker + ":7071");
    request.mutable_device()->set_kind("cpu");
    RegisterWorkerResponse response;
    return stub_->RegisterWorker(Ctx().get(), request, &response);
  }
  HeartbeatResponse Beat(const std::string& worker, const std::string& running) {
    HeartbeatRequest request;
    request.set_worker_id(worker);
    request.set_session_id(worker + "-session");
    request.set_running_job_id(running);
    HeartbeatResponse response;
    EXPECT_TRUE(stub_->Heartbeat(Ctx().get(), request, &response).ok());
    return response;
  }
  grpc::Status Submit(const std::string& json, std::string* id = nullptr) {
    SubmitJobRequest request;
    request.set_spec_json(json);
    SubmitJobResponse response;
    grpc::Status status = stub_->SubmitJob(Ctx().get(), request, &response);
    if (id != nullptr) *id = response.job().id();
    return status;
  }
  // Reads a whole WatchJob stream; its final status.
  grpc::Status Watch(const std::string& id, absl::Duration timeout) {
    auto context = Ctx(timeout);
    WatchJobRequest request;
    request.set_job_id(id);
    auto reader = stub_->WatchJob(context.get(), request);
    JobUpdate update;
    while (reader->Read(&update)) {
    }
    return reader->Finish();
  }

  metrics::Registry registry_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<CoordinatorService> service_;
  RunningServer server_;
  std::unique_ptr<metrics::MetricsServer> http_;
  std::unique_ptr<dtrain::Coordinator::Stub> stub_;
};

TEST_F(CoordinatorMetricsTest, EveryFamilyIsThereFromTheStartAndPromtoolAcceptsIt) {
  const std::string text = Scrape();
  for (const char* state : {"idle", "busy", "lost"}) {
    EXPECT_EQ(Sample(text, absl::StrCat("dtrain_coordinator_workers{state=\"", state, "\"}")), 0)
        << state;
  }
  for (const char* state : {"queued", "placing", "running", "succeeded", "failed", "cancelled"}) {
    EXPECT_EQ(Sample(text, absl::StrCat("dtrain_coordinator_jobs{state=\"", state, "\"}")), 0)
        << state;
  }
  EXPECT_EQ(Sample(text, "dtrain_coordinator_jobs_submitted_total"), 0);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_job_queue_wait_seconds_count"), 0);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_placement_seconds_count"), 0);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_jobs_awaiting_checkpoint"), 0);
  absl::Status promtool = metrics::testing::PromtoolCheckMetrics(text);
  EXPECT_TRUE(promtool.ok()) << promtool;
}

TEST_F(CoordinatorMetricsTest, CountsJobsWorkersAndRpcs) {
  ASSERT_TRUE(Register("w1").ok());
  EXPECT_EQ(Sample(Scrape(), "dtrain_coordinator_workers{state=\"idle\"}"), 1);

  // A bad spec, an unknown job, a good job that the worker runs to the end.
  EXPECT_EQ(Submit("{not json").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  GetJobRequest get;
  get.set_job_id("job-999999");
  Job job;
  EXPECT_EQ(stub_->GetJob(Ctx().get(), get, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  std::string id;
  ASSERT_TRUE(Submit(kTinySpec, &id).ok());
  std::string assigned;
  ASSERT_TRUE(WaitFor([&] {
    HeartbeatResponse r = Beat("w1", "");
    if (r.has_assignment()) assigned = r.assignment().job_id();
    return !assigned.empty();
  }));
  ASSERT_EQ(assigned, id);
  Beat("w1", id);  // acknowledges: RUNNING
  std::string text = Scrape();
  EXPECT_EQ(Sample(text, "dtrain_coordinator_jobs{state=\"running\"}"), 1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_workers{state=\"busy\"}"), 1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_workers{state=\"idle\"}"), 0);
  // `dtrain checkpoint`: the job awaits one until it ends (nothing is sealed here).
  CheckpointJobRequest ask;
  ask.set_job_id(id);
  ASSERT_TRUE(stub_->CheckpointJob(Ctx().get(), ask, &job).ok());
  EXPECT_EQ(Sample(Scrape(), "dtrain_coordinator_jobs_awaiting_checkpoint"), 1);

  ReportProgressRequest outcome;
  outcome.set_worker_id("w1");
  outcome.set_session_id("w1-session");
  outcome.set_job_id(id);
  outcome.mutable_outcome()->set_succeeded(true);
  outcome.mutable_outcome()->set_output("/data/model.safetensors");
  ReportProgressResponse progress;
  ASSERT_TRUE(stub_->ReportProgress(Ctx().get(), outcome, &progress).ok());
  EXPECT_TRUE(Watch(id, absl::Seconds(5)).ok());  // replays the history, ends after SUCCEEDED
  Beat("w1", "");  // it left the job: idle again (worker_registry.h: not at the outcome)

  // The stream's status is sent after the client sees it: wait for the server to count it.
  ASSERT_TRUE(WaitFor([&] {
    return Sample(Scrape(), "dtrain_coordinator_rpcs_total{method=\"WatchJob\",code=\"OK\"}") == 1;
  }));
  text = Scrape();
  ASSERT_TRUE(WaitFor(
      [&] { return Sample(Scrape(), "dtrain_coordinator_jobs_awaiting_checkpoint") == 0; }));
  text = Scrape();
  EXPECT_EQ(Sample(text, "dtrain_coordinator_jobs_submitted_total"), 1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_jobs{state=\"succeeded\"}"), 1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_jobs{state=\"running\"}"), 0);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_workers{state=\"idle\"}"), 1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_job_queue_wait_seconds_count"), 1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_placement_seconds_count"), 1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_placement_seconds_bucket{le=\"+Inf\"}"), 1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_rpcs_total{method=\"RegisterWorker\",code=\"OK\"}"),
            1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_rpcs_total{method=\"SubmitJob\",code=\"OK\"}"), 1);
  EXPECT_EQ(
      Sample(text, "dtrain_coordinator_rpcs_total{method=\"SubmitJob\",code=\"INVALID_ARGUMENT\"}"),
      1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_rpcs_total{method=\"GetJob\",code=\"NOT_FOUND\"}"), 1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_rpcs_total{method=\"ReportProgress\",code=\"OK\"}"),
            1);
  EXPECT_GE(Sample(text, "dtrain_coordinator_rpcs_total{method=\"Heartbeat\",code=\"OK\"}"), 2);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_rpc_duration_seconds_count{method=\"SubmitJob\"}"), 2);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_rpc_duration_seconds_count{method=\"WatchJob\"}"), 1);
  absl::Status promtool = metrics::testing::PromtoolCheckMetrics(text);
  EXPECT_TRUE(promtool.ok()) << promtool;
}

TEST_F(CoordinatorMetricsTest, AWatchTheClientAbandonsCountsWhenItsStreamEnds) {
  std::string id;
  ASSERT_TRUE(Submit(kTinySpec, &id).ok());  // no worker: stays QUEUED, the watch waits
  EXPECT_EQ(Watch(id, absl::Milliseconds(300)).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_TRUE(WaitFor([&] {
    return Sample(Scrape(), "dtrain_coordinator_rpc_duration_seconds_count{method=\"WatchJob\"}") ==
           1;
  })) << Scrape();
  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("dtrain_coordinator_rpcs_total{method=\"WatchJob\",code=\""));
  EXPECT_GE(Sample(text, "dtrain_coordinator_rpc_duration_seconds_sum{method=\"WatchJob\"}"), 0.2);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_jobs{state=\"queued\"}"), 1);
}

TEST(CoordinatorMetrics, ActiveJobsInfoQueuedAgeAndCheckpointAge) {
  metrics::Registry registry;
  auto m = CoordinatorMetrics::Create(&registry);
  ASSERT_TRUE(m.ok());
  const absl::Time now = absl::FromUnixSeconds(1800000000);
  CoordinatorMetrics::StateCounts counts;
  counts.now = now;
  counts.active = {
      {"job-000001", "tiny", RUNNING, now - absl::Minutes(10), now - absl::Seconds(42), 3 << 20},
      {"job-000002", std::string(100, 'n'), QUEUED, now - absl::Seconds(90)},
      {"job-000003", "", QUEUED, now - absl::Seconds(30)}};
  (*m)->SetStateSource(
      [&counts]() -> absl::StatusOr<CoordinatorMetrics::StateCounts> { return counts; });
  std::string text = registry.SerializeText();
  EXPECT_EQ(Sample(text, "dtrain_coordinator_oldest_queued_job_age_seconds"), 90);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_job_checkpoint_age_seconds{job_id=\"job-000001\"}"),
            42);
  EXPECT_THAT(text,
              Not(HasSubstr("dtrain_coordinator_job_checkpoint_age_seconds{job_id=\"job-000002")));
  EXPECT_EQ(Sample(text, "dtrain_coordinator_job_directory_bytes{job_id=\"job-000001\"}"), 3 << 20);
  EXPECT_THAT(text, Not(HasSubstr("dtrain_coordinator_job_directory_bytes{job_id=\"job-000002")));
  EXPECT_EQ(Sample(text,
                   "dtrain_coordinator_job_info{job_id=\"job-000001\",name=\"tiny\","
                   "state=\"running\"}"),
            1);
  EXPECT_THAT(text, HasSubstr("name=\"" + std::string(64, 'n') + "\",state"));  // bounded
  // Per owner: the workers their placed jobs hold and their queued jobs.
  counts.active[0].owner = "alice";
  counts.active[0].workers = 4;
  counts.active[1].owner = "alice";
  counts.active[2].owner = "bob";
  text = registry.SerializeText();
  EXPECT_EQ(Sample(text, "dtrain_coordinator_owner_workers{owner=\"alice\"}"), 4);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_owner_queued_jobs{owner=\"alice\"}"), 1);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_owner_workers{owner=\"bob\"}"), 0);
  EXPECT_EQ(Sample(text, "dtrain_coordinator_owner_queued_jobs{owner=\"bob\"}"), 1);

  // job-000001 ended, job-000002 runs: their old series are gone.
  counts.active = {{"job-000002", "big", RUNNING, now - absl::Seconds(90)}};
  text = registry.SerializeText();
  EXPECT_THAT(text, Not(HasSubstr("job-000001")));
  EXPECT_THAT(text, Not(HasSubstr("job-000003")));
  EXPECT_THAT(text, Not(HasSubstr("owner=\"alice\"")));  // her jobs ended: no series
  EXPECT_THAT(text, Not(HasSubstr("dtrain_coordinator_job_info{job_id=\"job-000002\",name=\"nnn")));
  EXPECT_EQ(Sample(text, "dtrain_coordinator_oldest_queued_job_age_seconds"), 0);
  (*m)->SetStateSource(nullptr);
}

TEST(CoordinatorMetrics, TwoInOneRegistryCollide) {
  metrics::Registry registry;
  auto first = CoordinatorMetrics::Create(&registry);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(CoordinatorMetrics::Create(&registry).status().code(),
            absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace dtrain::coordinator
