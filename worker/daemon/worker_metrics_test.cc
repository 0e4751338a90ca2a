// The worker's metrics as Prometheus sees them: series labelled by job and rank, bytes by peer
// and kind, collectives by op and size class, the previous job's series dropped at the next
// job, and output that Debian's promtool accepts.
#include "worker/daemon/worker_metrics.h"

#include <string>

#include "common/metrics/testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(WorkerMetrics, ExportsStepsBytesAndCollectivesPerRank) {
  metrics::Registry registry;
  auto backend = kernels::CreateBackend("cpu", 1).value();
  auto m = WorkerMetrics::Create(&registry, "w3", backend.get()).value();
  m->StartJob({"job-000007", 5, 1, 0, 1});
  TrainStepMetrics step;
  step.step = 12;
  step.loss = 2.5;
  step.step_seconds = 0.25;
  step.tokens_per_s = 4096;
  step.compute_seconds = 0.2;
  step.bubble_seconds = 0.05;
  m->OnStep(step);
  m->OnSent(4, comm::MessageKind::kActivation, 1000);
  m->OnSent(4, comm::MessageKind::kActivation, 24);
  m->OnReceived(7, comm::MessageKind::kCollective, 2 << 20);
  m->OnCollective("all_reduce", 2 << 20, 0.01);
  m->OnCheckpoint(0.5);
  const std::string text = registry.SerializeText();
  const std::string job = R"({job_id="job-000007",rank="5",dp="1",pp="0",tp="1")";
  EXPECT_THAT(text, HasSubstr(R"m(dtrain_worker_info{worker_id="w3",device="cpu (1 thread)"} 1)m"));
  EXPECT_THAT(text, HasSubstr("dtrain_worker_step" + job + "} 12"));
  EXPECT_THAT(text, HasSubstr("dtrain_worker_loss" + job + "} 2.5"));
  EXPECT_THAT(text, Not(HasSubstr("dtrain_worker_val_loss{")));  // no evaluation yet
  step.step = 13;
  step.val_loss = 2.75;
  m->OnStep(step);
  const std::string evaluated = registry.SerializeText();
  EXPECT_THAT(evaluated, HasSubstr("dtrain_worker_val_loss" + job + "} 2.75"));
  EXPECT_THAT(evaluated, HasSubstr("dtrain_worker_val_step" + job + "} 13"));
  EXPECT_THAT(text, HasSubstr("dtrain_worker_steps_total" + job + "} 1"));
  EXPECT_THAT(text, HasSubstr("dtrain_worker_sent_bytes_total" + job +
                              R"(,peer="4",kind="activation"} 1024)"));
  EXPECT_THAT(text, HasSubstr("dtrain_worker_received_bytes_total" + job +
                              R"(,peer="7",kind="collective"} 2097152)"));
  EXPECT_THAT(text, HasSubstr(R"(op="all_reduce",size_class="1MiB_16MiB")"));
  EXPECT_THAT(text, HasSubstr("dtrain_worker_checkpoint_write_seconds_count"));
  EXPECT_THAT(text, HasSubstr("dtrain_worker_device_memory_used_bytes{device=\"cpu (1 thread)\"}"));
  absl::Status promtool = metrics::testing::PromtoolCheckMetrics(text);
  EXPECT_TRUE(promtool.ok()) << promtool << "\n" << text;

  EXPECT_THAT(text, HasSubstr("dtrain_worker_job_running" + job + "} 1"));
  m->EndJob();
  EXPECT_THAT(registry.SerializeText(), HasSubstr("dtrain_worker_job_running" + job + "} 0"));

  // The next job replaces the previous job's series.
  m->StartJob({"job-000008", 0, 0, 0, 0});
  const std::string next = registry.SerializeText();
  EXPECT_THAT(next, Not(HasSubstr("job-000007")));
  EXPECT_THAT(next, HasSubstr(R"(dtrain_worker_steps_total{job_id="job-000008",rank="0")"));
}

TEST(WorkerMetrics, SizeClasses) {
  EXPECT_STREQ(WorkerMetrics::SizeClass(0), "lt_64KiB");
  EXPECT_STREQ(WorkerMetrics::SizeClass(64 << 10), "64KiB_1MiB");
  EXPECT_STREQ(WorkerMetrics::SizeClass(1 << 20), "1MiB_16MiB");
  EXPECT_STREQ(WorkerMetrics::SizeClass(16 << 20), "ge_16MiB");
}

}  // namespace
}  // namespace dtrain::worker
