// JobRunner: what a job spec becomes on one worker, and how each kind of job ends.
#include "worker/daemon/job_runner.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/job_paths.h"
#include "common/path_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/daemon/planned_for_testing.h"
#include "worker/plan_from_spec.h"
#include "worker/testing/text_corpus.h"

namespace dtrain::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Absolute and normalized, as the runner reports paths.
std::string TempPath(const std::string& name) {
  return AbsolutePath(::testing::TempDir() + "/" + name);
}

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

TEST(CheckDevice, AutoRunsAnywhereAndAKindOnItsOwn) {
  EXPECT_TRUE(CheckDevice(DEVICE_AUTO, Device(kernels::DeviceKind::kCpu)).ok());
  EXPECT_TRUE(CheckDevice(DEVICE_AUTO, Device(kernels::DeviceKind::kCuda)).ok());
  EXPECT_TRUE(CheckDevice(DEVICE_CPU, Device(kernels::DeviceKind::kCpu)).ok());
  EXPECT_TRUE(CheckDevice(DEVICE_CUDA, Device(kernels::DeviceKind::kCuda)).ok());
}

TEST(CheckDevice, CudaJobOnCpuWorkerNamesBoth) {
  absl::Status s = CheckDevice(DEVICE_CUDA, Device(kernels::DeviceKind::kCpu));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("asks for device \"cuda\""));
  EXPECT_THAT(s.message(), HasSubstr("cpu (1 threads)"));
  EXPECT_THAT(s.message(), HasSubstr("--device=cuda:N"));
  EXPECT_EQ(CheckDevice(DEVICE_CPU, Device(kernels::DeviceKind::kCuda)).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Coordinator and workers of one release are deployed together: an assignment of format 1 (no
// rank_plan) is refused before anything is read or written, naming the format.
TEST(JobRunner, AnAssignmentWithoutItsRankPlanFailsNamingTheFormat) {
  auto backend = kernels::CreateBackend("cpu", 1).value();
  JobAssignment a;
  a.set_job_id("job-000030");
  a.set_job_uid("uid-30");
  *a.mutable_spec() = TinySpec(WriteText("format1.txt", 2000));
  JobRunnerOptions options;
  options.worker_id = "w-test";
  options.data_root = TempPath("root-format1");
  std::vector<std::string> events;
  JobRunner runner(
      a, backend.get(), options,
      {[](const StepMetrics&, bool) {}, [&](const std::string& e) { events.push_back(e); }});
  const JobOutcome o = runner.Run();
  EXPECT_FALSE(o.succeeded());
  EXPECT_EQ(o.error_code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(o.error(), HasSubstr("has no rank_plan"));
  EXPECT_THAT(o.error(), HasSubstr("assignment format 2"));
  EXPECT_FALSE(Exists(TempPath("root-format1") + "/jobs/job-000030"));
}

// The job's matmul_precision is set on the worker's backend; a CPU worker refuses bf16 before
// anything is read or written (the coordinator plans such jobs for CUDA workers only, so only
// a hand-made assignment gets here).
TEST(JobRunner, ABf16JobOnACpuWorkerFailsNamingThePrecision) {
  auto backend = kernels::CreateBackend("cpu", 1).value();
  JobAssignment a;
  a.set_job_id("job-000031");
  a.set_job_uid("uid-31");
  *a.mutable_spec() = TinySpec(WriteText("bf16.txt", 2000));
  a.mutable_rank()->set_worker_id("w-test");
  absl::StatusOr<JobAssignment> planned = PlannedForTesting(a);
  ASSERT_TRUE(planned.ok()) << planned.status();
  planned->mutable_rank_plan()->set_matmul_precision(MATMUL_BF16);
  JobRunnerOptions options;
  options.worker_id = "w-test";
  options.data_root = TempPath("root-bf16");
  JobRunner runner(*planned, backend.get(), options,
                   {[](const StepMetrics&, bool) {}, [](const std::string&) {}});
  const JobOutcome o = runner.Run();
  EXPECT_FALSE(o.succeeded());
  EXPECT_EQ(o.error_code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(o.error(), HasSubstr("worker w-test: matmul precision bf16 needs a CUDA device; "
                                   "the backend of cpu (1 thread) computes in fp32"));
  EXPECT_FALSE(Exists(TempPath("root-bf16") + "/jobs/job-000031"));
}

TEST(JobDir, UnderCheckpointDirOrDataRootAndAbsolute) {
  JobSpec spec = TinySpec("data.txt");
  EXPECT_EQ(JobDir("job-000007", spec, "/srv/dtrain").value(), "/srv/dtrain/jobs/job-000007");
  spec.mutable_checkpoint()->set_dir("/ckpt/run1/");
  EXPECT_EQ(JobDir("job-000007", spec, "/srv/dtrain").value(), "/ckpt/run1/job-000007");
  spec.mutable_checkpoint()->set_dir("ckpt");
  EXPECT_EQ(JobDir("job-000007", spec, "/srv/dtrain").value(),
            AbsolutePath(".") + "/ckpt/job-000007");
}

TEST(JobDir, RefusesWhatIsNotAJobId) {
  for (const char* id : {"", "..", "job-1/../../etc", "job-"}) {
    absl::StatusOr<std::string> dir = JobDir(id, TinySpec("data.txt"), "/srv/dtrain");
    EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_THAT(dir.status().message(), HasSubstr("is not a job id")) << id;
  }
}

TEST(PlanFromSpec, DefaultsAndOutputInTheJobDirectory) {
  JobSpec spec = TinySpec("data.txt");
  spec.set_seq_len(0);
  spec.set_seed(0);
  auto plan = PlanFromSpec(spec, "/srv/dtrain/jobs/job-000007");
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
  // A spec without checkpoint settings checkpoints too (plan/checkpoint_plan.h).
  EXPECT_EQ(plan->checkpoint_dir, "/srv/dtrain/jobs/job-000007");
  EXPECT_EQ(plan->checkpoint_every, 100);
  EXPECT_EQ(plan->keep_last, 3);
  EXPECT_EQ(plan->save_path, "/srv/dtrain/jobs/job-000007/model.safetensors");
  EXPECT_EQ(plan->data_path, AbsolutePath("data.txt"));  // resolved once, at the start
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
  auto plan = PlanFromSpec(spec, "/srv/dtrain/jobs/job-000007");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FLOAT_EQ(plan->optimizer.lr, 0.0f);  // the schedule
  EXPECT_FLOAT_EQ(plan->optimizer.max_lr, 3e-3f);
  EXPECT_FLOAT_EQ(plan->optimizer.min_lr_ratio, 0.0f);
  EXPECT_FLOAT_EQ(plan->optimizer.weight_decay, 0.0f);
  EXPECT_FLOAT_EQ(plan->optimizer.grad_clip, 0.0f);
  EXPECT_EQ(plan->optimizer.warmup_steps, 4);
}

TEST(PlanFromSpec, TheJobDirectoryHoldsTrainingStateAndFinalWeights) {
  JobSpec spec = TinySpec("data.txt");
  spec.mutable_checkpoint()->set_dir("/ckpt/run1");
  spec.mutable_checkpoint()->set_interval_steps(2);
  auto plan = PlanFromSpec(spec, "/ckpt/run1/job-000007");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->checkpoint_dir, "/ckpt/run1/job-000007");
  EXPECT_EQ(plan->checkpoint_every, 2);
  EXPECT_EQ(plan->save_path, "/ckpt/run1/job-000007/model.safetensors");
}

TEST(PlanFromSpec, ReportsEveryBadFieldAtOnce) {
  JobSpec spec = TinySpec("");
  spec.mutable_model()->set_n_head(3);
  spec.set_steps(0);
  spec.set_batch_size(0);
  spec.mutable_optimizer()->set_lr(-1);
  absl::Status s = PlanFromSpec(spec, "/d/jobs/job-000001").status();
  // The job plan's words (plan/job_plan.h), as the coordinator and `dtrain plan` say them.
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model.n_head=3"));
  EXPECT_THAT(s.message(), HasSubstr("dataset is required"));
  EXPECT_THAT(s.message(), HasSubstr("steps=0 must be positive"));
  EXPECT_THAT(s.message(), HasSubstr("batch_size=0 must be positive"));
  EXPECT_THAT(s.message(), HasSubstr("optimizer.lr=-1 must be >= 0"));
}

struct Recorded {
  std::vector<int64_t> steps;
  std::vector<std::string> events;
  std::vector<JobLocation> locations;
  std::vector<CheckpointSealed> sealed;
  std::vector<std::string> allowed_roots;  // given to the runner; empty: the temp dir and cwd
};

JobOutcome RunJob(const JobSpec& spec, const std::string& job_id, Recorded& rec,
                  std::function<void(JobRunner&, int64_t)> after_step = nullptr,
                  const std::string& job_uid = "", int attempt = 0) {
  auto backend = kernels::CreateBackend("cpu", 1).value();
  JobAssignment a;
  a.set_job_id(job_id);
  a.set_job_uid(job_uid.empty() ? "uid-" + job_id : job_uid);
  a.set_attempt(attempt);
  *a.mutable_spec() = spec;
  JobRunnerOptions options;
  options.worker_id = "w-test";
  options.host_label = "host-a";
  options.data_root = TempPath("root");
  // The test's files and its working directory (relative datasets).
  options.allowed_roots = rec.allowed_roots.empty()
                              ? ResolveRoots({::testing::TempDir(), "."}).value()
                              : rec.allowed_roots;
  JobRunner* self = nullptr;
  if (after_step) options.after_step = [&](int64_t step) { after_step(*self, step); };
  JobRunner::Callbacks cb;
  cb.step = [&](const StepMetrics& m, bool report) {
    EXPECT_TRUE(report);  // one worker reports every step
    rec.steps.push_back(m.step());
  };
  cb.event = [&](const std::string& e) { rec.events.push_back(e); };
  cb.location = [&](const JobLocation& l) { rec.locations.push_back(l); };
  cb.checkpoint = [&](const CheckpointSealed& c) { rec.sealed.push_back(c); };
  JobRunner runner(PlannedIfValidForTesting(a), backend.get(), options, cb);
  self = &runner;
  return runner.Run();
}

std::vector<int64_t> SealedSteps(const Recorded& rec) {
  std::vector<int64_t> steps;
  for (const CheckpointSealed& c : rec.sealed) steps.push_back(c.step());
  return steps;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(JobRunner, TrainsAndWritesWeightsInItsDirectoryUnderDataRoot) {
  const std::string data = WriteText("run.txt", 2000);
  Recorded rec;
  JobOutcome o = RunJob(TinySpec(data), "job-000001", rec);
  ASSERT_TRUE(o.succeeded()) << o.error();
  const std::string dir = TempPath("root/jobs/job-000001");
  EXPECT_EQ(o.output(), dir + "/model.safetensors");
  EXPECT_EQ(o.output_host(), "host-a");
  EXPECT_TRUE(Exists(o.output()));
  EXPECT_THAT(ReadFile(dir + "/job.json"), HasSubstr("\"job_uid\": \"uid-job-000001\""));
  EXPECT_THAT(rec.steps, ElementsAre(1, 2, 3, 4, 5));
  ASSERT_EQ(rec.locations.size(), 1u);
  EXPECT_EQ(rec.locations[0].dir(), dir);
  EXPECT_EQ(rec.locations[0].host(), "host-a");
  EXPECT_EQ(rec.locations[0].resumed_from_step(), 0);
  EXPECT_EQ(rec.locations[0].resumed_from(), "");
  // No checkpoint settings: it checkpoints in its directory under data_root all the same (every
  // 100 steps and at the end: plan/checkpoint_plan.h).
  ASSERT_EQ(rec.sealed.size(), 1u);
  EXPECT_EQ(rec.sealed[0].step(), 5);
  EXPECT_EQ(rec.sealed[0].path(), dir + "/step_00000005");
  ASSERT_FALSE(rec.events.empty());
  EXPECT_EQ(rec.events.front(), "loaded dataset " + data + " (2000 tokens)");
  EXPECT_EQ(rec.events.back(), "weights written to " + o.output());
}

TEST(JobRunner, ReportsEverySealedCheckpointAfterItIsWritten) {
  JobSpec spec = TinySpec(WriteText("ckpt.txt", 2000));
  spec.mutable_checkpoint()->set_dir(TempPath("ckpt_dir/nested"));
  spec.mutable_checkpoint()->set_interval_steps(2);
  Recorded rec;
  JobOutcome o = RunJob(spec, "job-000002", rec);
  ASSERT_TRUE(o.succeeded()) << o.error();
  const std::string dir = TempPath("ckpt_dir/nested/job-000002");
  EXPECT_EQ(o.output(), dir + "/model.safetensors");
  EXPECT_TRUE(Exists(o.output()));
  EXPECT_THAT(SealedSteps(rec), ElementsAre(2, 4, 5));
  std::vector<std::string> announced;
  for (const std::string& e : rec.events) {
    if (absl::StartsWith(e, "checkpoint")) announced.push_back(e);
  }
  EXPECT_THAT(announced, ElementsAre("checkpoint sealed at step 2: " + dir + "/step_00000002",
                                     "checkpoint sealed at step 4: " + dir + "/step_00000004",
                                     "checkpoint sealed at step 5: " + dir + "/step_00000005"));
  for (const CheckpointSealed& c : rec.sealed) {
    EXPECT_EQ(c.path(), dir + "/" + StepDirName(c.step()));
    EXPECT_TRUE(Exists(c.path() + "/manifest.json")) << c.path();  // sealed
  }
}

TEST(JobRunner, TwoJobsNamingOneCheckpointDirEachWriteOnlyTheirOwnDirectory) {
  JobSpec spec = TinySpec(WriteText("shared.txt", 2000));
  spec.mutable_checkpoint()->set_dir(TempPath("shared_ckpt"));
  Recorded first, second;
  JobOutcome a = RunJob(spec, "job-000011", first);
  ASSERT_TRUE(a.succeeded()) << a.error();
  const std::string a_weights = ReadFile(a.output());
  spec.set_seed(99);
  JobOutcome b = RunJob(spec, "job-000012", second);
  ASSERT_TRUE(b.succeeded()) << b.error();
  EXPECT_EQ(a.output(), TempPath("shared_ckpt/job-000011/model.safetensors"));
  EXPECT_EQ(b.output(), TempPath("shared_ckpt/job-000012/model.safetensors"));
  EXPECT_EQ(ReadFile(a.output()), a_weights) << "the second job changed the first job's output";
  EXPECT_NE(ReadFile(b.output()), a_weights);
  EXPECT_FALSE(Exists(TempPath("shared_ckpt/latest")));
  EXPECT_FALSE(Exists(TempPath("shared_ckpt/model.safetensors")));
}

TEST(JobRunner, ADirectoryClaimedByAnotherJobUidIsRefusedBeforeTraining) {
  JobSpec spec = TinySpec(WriteText("claimed.txt", 2000));
  spec.mutable_checkpoint()->set_dir(TempPath("claimed_ckpt"));
  const std::string dir = TempPath("claimed_ckpt/job-000013");
  ASSERT_TRUE(ClaimJobDirectory(dir, "job-000013", "uid-of-another-database").ok());
  Recorded rec;
  JobOutcome o = RunJob(spec, "job-000013", rec, nullptr, "uid-mine");
  EXPECT_FALSE(o.succeeded());
  EXPECT_EQ(o.kind(), FAILURE_LOCAL);
  EXPECT_THAT(o.error(), HasSubstr("job directory " + dir + " belongs to job-000013"));
  EXPECT_TRUE(rec.steps.empty());
  EXPECT_FALSE(Exists(dir + "/latest"));
  EXPECT_THAT(ReadFile(dir + "/job.json"), HasSubstr("uid-of-another-database"));
}

TEST(JobRunner, AResumedJobSaysWhereFromAndSealsOnlyTheStepsItWrote) {
  JobSpec spec = TinySpec(WriteText("resume.txt", 2000));
  spec.mutable_checkpoint()->set_dir(TempPath("resume_ckpt"));
  spec.mutable_checkpoint()->set_interval_steps(2);
  Recorded first;
  ASSERT_TRUE(RunJob(spec, "job-000014", first).succeeded());
  const std::string from = TempPath("resume_ckpt/job-000014/step_00000005");
  const std::string weights_before = ReadFile(from + "/model.safetensors");

  spec.set_steps(8);
  spec.set_resume_from(TempPath("resume_ckpt/job-000014"));
  Recorded rec;
  JobOutcome o = RunJob(spec, "job-000015", rec);
  ASSERT_TRUE(o.succeeded()) << o.error();
  EXPECT_THAT(rec.steps, ElementsAre(6, 7, 8));
  ASSERT_EQ(rec.locations.size(), 1u);
  EXPECT_EQ(rec.locations[0].resumed_from_step(), 5);
  EXPECT_EQ(rec.locations[0].resumed_from(), from);
  EXPECT_THAT(rec.events, ::testing::Contains("resumed from " + from + " at step 5"));
  EXPECT_THAT(SealedSteps(rec), ElementsAre(6, 8));  // never the step it only loaded
  for (const std::string& e : rec.events) EXPECT_THAT(e, Not(HasSubstr("step 5:")));
  EXPECT_EQ(ReadFile(from + "/model.safetensors"), weights_before);
  EXPECT_EQ(ReadFile(TempPath("resume_ckpt/job-000014/latest")), "step_00000005\n");
}

TEST(JobRunner, ARecoveryRunResumesFromTheJobsOwnLatestSealedStep) {
  JobSpec spec = TinySpec(WriteText("recovery.txt", 2000));
  spec.mutable_checkpoint()->set_dir(TempPath("recovery_ckpt"));
  spec.mutable_checkpoint()->set_interval_steps(2);
  Recorded first;
  JobOutcome stopped = RunJob(spec, "job-000017", first, [](JobRunner& runner, int64_t step) {
    if (step == 3) runner.Cancel("worker lost");  // the run dies after step 3
  });
  ASSERT_FALSE(stopped.succeeded());
  ASSERT_THAT(SealedSteps(first), ElementsAre(2));
  // The same job (same uid) again, as the run after its first recovery.
  Recorded rec;
  JobOutcome o = RunJob(spec, "job-000017", rec, nullptr, "", /*attempt=*/1);
  ASSERT_TRUE(o.succeeded()) << o.error();
  EXPECT_THAT(rec.steps, ElementsAre(3, 4, 5));  // step 3 redone
  ASSERT_EQ(rec.locations.size(), 1u);
  EXPECT_EQ(rec.locations[0].resumed_from_step(), 2);
  EXPECT_THAT(SealedSteps(rec), ElementsAre(4, 5));
}

TEST(JobRunner, ARecoveryRunWithNoCheckpointYetStartsOver) {
  JobSpec spec = TinySpec(WriteText("recovery0.txt", 2000));
  spec.mutable_checkpoint()->set_dir(TempPath("recovery0_ckpt"));
  Recorded rec;
  JobOutcome o = RunJob(spec, "job-000018", rec, nullptr, "", /*attempt=*/1);
  ASSERT_TRUE(o.succeeded()) << o.error();
  EXPECT_THAT(rec.steps, ElementsAre(1, 2, 3, 4, 5));
}

TEST(JobRunner, RelativeDatasetSaysWhereItWasResolvedFrom) {
  Recorded rec;
  JobOutcome o = RunJob(TinySpec("data/no_such_demo.txt"), "job-000016", rec);
  EXPECT_FALSE(o.succeeded());
  EXPECT_EQ(o.kind(), FAILURE_LOCAL);
  EXPECT_EQ(o.error(), "dataset data/no_such_demo.txt (relative, resolved from " +
                           AbsolutePath(".") +
                           ", the worker's working directory) cannot be read on worker w-test: "
                           "No such file or directory");
}

TEST(JobRunner, MissingDatasetFailsNamingThePath) {
  const std::string missing = TempPath("no/such/dataset.txt");
  Recorded rec;
  JobOutcome o = RunJob(TinySpec(missing), "job-000003", rec);
  EXPECT_FALSE(o.succeeded());
  EXPECT_EQ(o.kind(), FAILURE_LOCAL);
  EXPECT_TRUE(o.suspect_workers().empty());
  EXPECT_EQ(o.error(), "dataset " + missing +
                           " cannot be read on worker w-test: "
                           "No such file or directory");
  // Bad input: the coordinator does not restart the job for it (failure_report.h).
  EXPECT_EQ(o.error_code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_TRUE(rec.steps.empty());
}

TEST(JobRunner, DatasetOutsideTheRootsFailsBeforeAnythingIsWritten) {
  const std::string root = TempPath("confined");
  ASSERT_TRUE(MakeDirectories(root).ok());
  const std::string outside = WriteText("outside.txt", 2000);
  Recorded rec;
  rec.allowed_roots = {root};
  JobOutcome o = RunJob(TinySpec(outside), "job-000020", rec);
  EXPECT_FALSE(o.succeeded());
  EXPECT_EQ(o.kind(), FAILURE_LOCAL);
  EXPECT_EQ(o.error(), "worker w-test: dataset " + outside +
                           " is outside this worker's allowed roots (" + root +
                           "): set --allowed_paths on the worker to allow it");
  // Bad input, not retried (failure_report.h RestartCanCure).
  EXPECT_EQ(o.error_code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(rec.steps.empty());
  EXPECT_TRUE(rec.events.empty());
  EXPECT_FALSE(Exists(TempPath("root/jobs/job-000020")));
}

TEST(JobRunner, CheckpointDirThroughAnEscapingSymlinkFailsAndWritesNothingThere) {
  const std::string root = TempPath("confined2");
  const std::string elsewhere = TempPath("elsewhere");
  ASSERT_TRUE(MakeDirectories(root).ok());
  ASSERT_TRUE(MakeDirectories(elsewhere).ok());
  ASSERT_EQ(symlink(elsewhere.c_str(), (root + "/link").c_str()), 0);
  JobSpec spec = TinySpec(WriteText("confined2/data.txt", 2000));
  spec.mutable_checkpoint()->set_dir(root + "/link/ckpt");
  Recorded rec;
  rec.allowed_roots = {root};
  JobOutcome o = RunJob(spec, "job-000021", rec);
  EXPECT_FALSE(o.succeeded());
  EXPECT_THAT(o.error(),
              HasSubstr("checkpoint.dir " + root + "/link/ckpt resolves to " + elsewhere +
                        "/ckpt, which is outside this worker's allowed "
                        "roots (" +
                        root + ")"));
  EXPECT_FALSE(Exists(elsewhere + "/ckpt"));
  // The job's directory is checked too: a job id linked out of a checkpoint.dir inside.
  ASSERT_EQ(symlink(elsewhere.c_str(), (root + "/job-000022").c_str()), 0);
  spec.mutable_checkpoint()->set_dir(root);
  o = RunJob(spec, "job-000022", rec);
  EXPECT_THAT(o.error(),
              HasSubstr("job directory " + root + "/job-000022 resolves to " + elsewhere));
  EXPECT_FALSE(Exists(elsewhere + "/job.json"));
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
  EXPECT_THAT(o.error(), HasSubstr("gives no rank to worker w-test"));
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
  EXPECT_EQ(o.kind(), FAILURE_STOPPED);
  EXPECT_EQ(o.error(), "worker stopped by SIGTERM after step 2");
  EXPECT_THAT(rec.steps, ElementsAre(1, 2));
}

}  // namespace
}  // namespace dtrain::worker
