// JobRunner: what a job spec becomes on one worker, and how each kind of job ends.
#include "worker/daemon/job_runner.h"

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/testing/text_corpus.h"

namespace dtrain::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::string WriteText(const std::string& name, int bytes) {
  return dtrain::testing::WriteTextCorpus(TempPath(name), bytes);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

JobSpec TinySpec(const std::string& dataset) {
  JobSpec spec;
  spec.set_name("tiny");
  ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(256);
  m->set_context(16);
  m->set_n_layer(2);
  m->set_n_head(2);
  m->set_n_embd(16);
  spec.set_dataset(dataset);
  spec.set_steps(5);
  spec.set_batch_size(2);
  spec.set_seq_len(16);
  spec.mutable_optimizer()->set_lr(1e-2f);
  return spec;
}

kernels::DeviceInfo Device(kernels::DeviceKind kind) {
  kernels::DeviceInfo d;
  d.kind = kind;
  d.name = kind == kernels::DeviceKind::kCuda ? "NVIDIA H100" : "cpu (1 threads)";
  return d;
}

TEST(CheckDevice, AutoAndEmptyRunAnywhere) {
  EXPECT_TRUE(CheckDevice("", Device(kernels::DeviceKind::kCpu)).ok());
  EXPECT_TRUE(CheckDevice("auto", Device(kernels::DeviceKind::kCuda)).ok());
  EXPECT_TRUE(CheckDevice("cpu", Device(kernels::DeviceKind::kCpu)).ok());
  EXPECT_TRUE(CheckDevice("cuda", Device(kernels::DeviceKind::kCuda)).ok());
  EXPECT_TRUE(CheckDevice("cuda:3", Device(kernels::DeviceKind::kCuda)).ok());
}

TEST(CheckDevice, CudaJobOnCpuWorkerNamesBoth) {
  absl::Status s = CheckDevice("cuda", Device(kernels::DeviceKind::kCpu));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("asks for device \"cuda\""));
  EXPECT_THAT(s.message(), HasSubstr("cpu (1 threads)"));
  EXPECT_THAT(s.message(), HasSubstr("--device=cuda:N"));
  EXPECT_EQ(CheckDevice("cpu", Device(kernels::DeviceKind::kCuda)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckDevice("tpu", Device(kernels::DeviceKind::kCpu)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlanFromSpec, DefaultsAndOutputUnderDataRoot) {
  JobSpec spec = TinySpec("data.txt");
  spec.set_seq_len(0);
  spec.set_seed(0);
  auto plan = PlanFromSpec("job-000007", spec, "/srv/dtrain");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->seq, 16);  // model.context
  EXPECT_EQ(plan->seed, 1337u);
  EXPECT_EQ(plan->batch, 2);
  EXPECT_EQ(plan->steps, 5);
  EXPECT_FLOAT_EQ(plan->optimizer.lr, 1e-2f);  // constant
  EXPECT_FLOAT_EQ(plan->optimizer.beta1, 0.9f);
  EXPECT_FLOAT_EQ(plan->optimizer.beta2, 0.95f);
  EXPECT_FLOAT_EQ(plan->optimizer.eps, 1e-8f);
  EXPECT_FLOAT_EQ(plan->optimizer.grad_clip, 1.0f);
  EXPECT_FLOAT_EQ(plan->optimizer.weight_decay, 0.1f);
  EXPECT_FLOAT_EQ(plan->optimizer.min_lr_ratio, 0.1f);
  EXPECT_FLOAT_EQ(plan->optimizer.max_lr, 6e-4f);
  EXPECT_EQ(plan->checkpoint_dir, "");
  EXPECT_EQ(plan->save_path, "/srv/dtrain/jobs/job-000007/model.safetensors");
}

TEST(PlanFromSpec, ExplicitOptimizerZerosAreKept) {
  JobSpec spec = TinySpec("data.txt");
  OptimizerConfig* o = spec.mutable_optimizer();
  o->set_lr(0);
  o->set_max_lr(3e-3f);
  o->set_min_lr_ratio(0);
  o->set_weight_decay(0);
  o->set_grad_clip(0);
  o->set_warmup_steps(4);
  auto plan = PlanFromSpec("job-000007", spec, "/srv/dtrain");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FLOAT_EQ(plan->optimizer.lr, 0.0f);  // the schedule
  EXPECT_FLOAT_EQ(plan->optimizer.max_lr, 3e-3f);
  EXPECT_FLOAT_EQ(plan->optimizer.min_lr_ratio, 0.0f);
  EXPECT_FLOAT_EQ(plan->optimizer.weight_decay, 0.0f);
  EXPECT_FLOAT_EQ(plan->optimizer.grad_clip, 0.0f);
  EXPECT_EQ(plan->optimizer.warmup_steps, 4);
}

TEST(PlanFromSpec, CheckpointDirHoldsTheFinalWeights) {
  JobSpec spec = TinySpec("data.txt");
  spec.mutable_checkpoint()->set_dir("/ckpt/run1");
  spec.mutable_checkpoint()->set_interval_steps(2);
  auto plan = PlanFromSpec("job-000007", spec, "/srv/dtrain");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->checkpoint_dir, "/ckpt/run1");
  EXPECT_EQ(plan->checkpoint_every, 2);
  EXPECT_EQ(plan->save_path, "/ckpt/run1/model.safetensors");
}

TEST(PlanFromSpec, ReportsEveryBadFieldAtOnce) {
  JobSpec spec = TinySpec("");
  spec.mutable_model()->set_n_head(3);
  spec.set_steps(0);
  spec.set_batch_size(0);
  spec.mutable_optimizer()->set_lr(-1);
  absl::Status s = PlanFromSpec("job-1", spec, "/d").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model: "));
  EXPECT_THAT(s.message(), HasSubstr("n_head=3"));
  EXPECT_THAT(s.message(), HasSubstr("dataset is empty"));
  EXPECT_THAT(s.message(), HasSubstr("steps=0"));
  EXPECT_THAT(s.message(), HasSubstr("batch_size=0"));
  EXPECT_THAT(s.message(), HasSubstr("optimizer: "));
}

TEST(MakeDirs, CreatesParentsAndAcceptsExisting) {
  const std::string dir = TempPath("mk/a/b/c");
  ASSERT_TRUE(MakeDirs(dir).ok());
  EXPECT_TRUE(Exists(dir));
  EXPECT_TRUE(MakeDirs(dir).ok());
  const std::string file = WriteText("mk_file", 3);
  EXPECT_FALSE(MakeDirs(file + "/sub").ok());
}

struct Recorded {
  std::vector<int64_t> steps;
  std::vector<std::string> events;
};

JobOutcome RunJob(const JobSpec& spec, const std::string& job_id, Recorded& rec,
                  std::function<void(JobRunner&, int64_t)> after_step = nullptr) {
  auto backend = kernels::CreateBackend("cpu", 1).value();
  JobAssignment a;
  a.set_job_id(job_id);
  *a.mutable_spec() = spec;
  JobRunnerOptions options;
  options.worker_id = "w-test";
  options.data_root = TempPath("root");
  JobRunner* self = nullptr;
  if (after_step) options.after_step = [&](int64_t step) { after_step(*self, step); };
  JobRunner::Callbacks cb;
  cb.step = [&](const StepMetrics& m, bool report) {
    EXPECT_TRUE(report);  // one worker reports every step
    rec.steps.push_back(m.step());
  };
  cb.event = [&](const std::string& e) { rec.events.push_back(e); };
  JobRunner runner(a, backend.get(), options, cb);
  self = &runner;
  return runner.Run();
}

TEST(JobRunner, TrainsAndWritesWeightsUnderDataRoot) {
  const std::string data = WriteText("run.txt", 2000);
  Recorded rec;
  JobOutcome o = RunJob(TinySpec(data), "job-000001", rec);
  ASSERT_TRUE(o.succeeded()) << o.error();
  EXPECT_EQ(o.output(), TempPath("root") + "/jobs/job-000001/model.safetensors");
  EXPECT_TRUE(Exists(o.output()));
  EXPECT_THAT(rec.steps, ElementsAre(1, 2, 3, 4, 5));
  ASSERT_FALSE(rec.events.empty());
  EXPECT_EQ(rec.events.front(), "loaded dataset " + data + " (2000 tokens)");
  EXPECT_EQ(rec.events.back(), "weights written to " + o.output());
}

TEST(JobRunner, AnnouncesCheckpointsAfterTheyAreWritten) {
  JobSpec spec = TinySpec(WriteText("ckpt.txt", 2000));
  spec.mutable_checkpoint()->set_dir(TempPath("ckpt_dir/nested"));
  spec.mutable_checkpoint()->set_interval_steps(2);
  Recorded rec;
  JobOutcome o = RunJob(spec, "job-000002", rec);
  ASSERT_TRUE(o.succeeded()) << o.error();
  EXPECT_EQ(o.output(), TempPath("ckpt_dir/nested/model.safetensors"));
  EXPECT_TRUE(Exists(o.output()));
  std::vector<std::string> checkpoints;
  for (const std::string& e : rec.events) {
    if (e.rfind("checkpoint written", 0) == 0) checkpoints.push_back(e);
  }
  const std::string dir = TempPath("ckpt_dir/nested");
  EXPECT_THAT(checkpoints, ElementsAre("checkpoint written to " + dir + "/step_00000002 at step 2",
                                       "checkpoint written to " + dir + "/step_00000004 at step 4",
                                       "checkpoint written to " + dir + "/step_00000005 at step 5"));
  for (const char* step : {"/step_00000002", "/step_00000004", "/step_00000005"}) {
    EXPECT_TRUE(Exists(dir + step + "/model.safetensors")) << step;
  }
}

TEST(JobRunner, MissingDatasetFailsNamingThePath) {
  const std::string missing = TempPath("no/such/dataset.txt");
  Recorded rec;
  JobOutcome o = RunJob(TinySpec(missing), "job-000003", rec);
  EXPECT_FALSE(o.succeeded());
  EXPECT_THAT(o.error(), HasSubstr("dataset " + missing));
  EXPECT_THAT(o.error(), HasSubstr("No such file"));
  EXPECT_TRUE(rec.steps.empty());
}

TEST(JobRunner, DatasetShorterThanOneBatchFails) {
  Recorded rec;
  JobOutcome o = RunJob(TinySpec(WriteText("short.txt", 10)), "job-000004", rec);
  EXPECT_FALSE(o.succeeded());
  EXPECT_THAT(o.error(), HasSubstr("cannot start training"));
  EXPECT_THAT(o.error(), HasSubstr("short.txt"));
}

TEST(JobRunner, MultiWorkerJobWithoutPlacementFailsAtOnce) {
  JobSpec spec = TinySpec(WriteText("layout.txt", 2000));
  spec.mutable_parallel()->set_tp(2);
  spec.mutable_parallel()->set_pp(2);
  Recorded rec;
  JobOutcome o = RunJob(spec, "job-000005", rec);  // no placement either
  EXPECT_FALSE(o.succeeded());
  EXPECT_THAT(o.error(), HasSubstr("lists 0 ranks, not 4"));
  EXPECT_TRUE(rec.steps.empty());
}

TEST(JobRunner, CancelStopsAtTheNextStepBoundary) {
  JobSpec spec = TinySpec(WriteText("cancel.txt", 2000));
  spec.set_steps(100);
  Recorded rec;
  JobOutcome o = RunJob(spec, "job-000006", rec, [](JobRunner& r, int64_t step) {
    if (step == 2) r.Cancel("worker stopped by SIGTERM");
  });
  EXPECT_FALSE(o.succeeded());
  EXPECT_EQ(o.error(), "worker stopped by SIGTERM after step 2");
  EXPECT_THAT(rec.steps, ElementsAre(1, 2));
}

}  // namespace
}  // namespace dtrain::worker
