#include "plan/job_plan.h"

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "plan/rank_plan.h"
#include "plan/ranks.h"
#include "plan/spec_json.h"

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace dtrain::plan {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;

constexpr const char* kTinySpec = R"({
  "name": "tiny",
  "model": {"vocab_size": 256, "context": 64, "n_layer": 4, "n_head": 4, "n_embd": 64},
  "dataset": "/data/tiny.bin",
  "steps": 10,
  "batch_size": 8,
  "checkpoint": {"dir": "/ckpt/tiny"}
})";

// The spec of MakeJobPlan's plan (the checks and defaults).
absl::StatusOr<JobSpec> Validated(JobSpec spec) {
  absl::StatusOr<JobPlan> plan = MakeJobPlan(std::move(spec));
  if (!plan.ok()) return plan.status();
  return plan->spec();
}

absl::StatusOr<JobSpec> ParsedAndValidated(const std::string& json) {
  absl::StatusOr<JobPlan> plan = ParseJobPlanJson(json);
  if (!plan.ok()) return plan.status();
  return plan->spec();
}

JobSpec Parsed(const std::string& json) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

TEST(ParseJobSpecJson, ReadsEveryField) {
  JobSpec spec = Parsed(R"({
    "name": "full", "model": {"vocab_size": 50257, "context": 1024, "n_layer": 12,
    "n_head": 12, "n_embd": 768}, "dataset": "/d.bin", "init_checkpoint": "/gpt2.safetensors",
    "optimizer": {"lr": 0, "max_lr": 3e-4, "warmup_steps": 10, "grad_clip": 0},
    "steps": 100, "batch_size": 16, "micro_batch_size": 2, "seq_len": 512,
    "parallel": {"dp": 2, "pp": 2, "tp": 2, "schedule": "gpipe", "zero1": true},
    "checkpoint": {"dir": "/ckpt", "interval_steps": 50}, "device": "cuda", "seed": 7})");
  EXPECT_EQ(spec.model().n_embd(), 768);
  EXPECT_EQ(spec.init_checkpoint(), "/gpt2.safetensors");
  EXPECT_FLOAT_EQ(spec.optimizer().max_lr(), 3e-4f);
  EXPECT_TRUE(spec.optimizer().has_grad_clip());
  EXPECT_FALSE(spec.optimizer().has_weight_decay());
  EXPECT_EQ(spec.parallel().schedule(), "gpipe");
  EXPECT_TRUE(spec.parallel().zero1());
  EXPECT_EQ(spec.checkpoint().interval_steps(), 50);
  EXPECT_EQ(spec.seed(), 7u);
}

TEST(ParseJobSpecJson, AcceptsCamelCaseKeysAsProtobufDoes) {
  JobSpec spec = Parsed(R"({"batchSize": 4, "parallel": {"virtualStages": 2}})");
  EXPECT_EQ(spec.batch_size(), 4);
  EXPECT_EQ(spec.parallel().virtual_stages(), 2);
}

TEST(ParseJobSpecJson, MalformedJsonIsInvalidArgument) {
  // (protobuf's parser accepts a trailing comma, so that is not in the list.)
  for (const char* json : {"", "{", R"({"steps": 10)", "[1, 2]", "not json", R"({"a" 1})"}) {
    absl::StatusOr<JobSpec> spec = ParseJobSpecJson(json);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(spec.status().message(), HasSubstr("job spec")) << json;
  }
}

TEST(ParseJobSpecJson, ListsEveryUnknownFieldWithItsPath) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(
      R"({"stepz": 10, "model": {"n_layers": 4}, "parallel": {"tpp": 2}, "colour": "red"})");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              AllOf(HasSubstr("unknown field \"stepz\" (did you mean \"steps\"?)"),
                    HasSubstr("unknown field \"model.n_layers\" (did you mean \"n_layer\"?)"),
                    HasSubstr("unknown field \"parallel.tpp\" (did you mean \"tp\"?)"),
                    HasSubstr("unknown field \"colour\"")))
      << spec.status();
  EXPECT_THAT(spec.status().message(), Not(HasSubstr("\"colour\" (did you mean")));
}

TEST(ParseJobSpecJson, WrongTypeIsInvalidArgumentNamingTheField) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({"steps": "ten"})");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("steps"));
}

TEST(MakeJobPlan, FillsEveryDefault) {
  absl::StatusOr<JobSpec> spec = Validated(Parsed(kTinySpec));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().dp(), 1);
  EXPECT_EQ(spec->parallel().pp(), 1);
  EXPECT_EQ(spec->parallel().tp(), 1);
  EXPECT_EQ(spec->parallel().schedule(), "1f1b");
  EXPECT_EQ(spec->parallel().virtual_stages(), 1);
  EXPECT_EQ(spec->parallel().bucket_bytes(), 25 << 20);
  EXPECT_EQ(spec->micro_batch_size(), 8);
  EXPECT_EQ(spec->seq_len(), 64);
  EXPECT_EQ(spec->device(), "auto");
  EXPECT_EQ(spec->seed(), 1337u);
  const OptimizerConfig& o = spec->optimizer();
  EXPECT_FLOAT_EQ(o.lr(), 0.0f);
  EXPECT_FLOAT_EQ(o.max_lr(), 6e-4f);
  EXPECT_FLOAT_EQ(o.min_lr_ratio(), 0.1f);
  EXPECT_FLOAT_EQ(o.weight_decay(), 0.1f);
  EXPECT_FLOAT_EQ(o.beta1(), 0.9f);
  EXPECT_FLOAT_EQ(o.beta2(), 0.95f);
  EXPECT_FLOAT_EQ(o.eps(), 1e-8f);
  EXPECT_FLOAT_EQ(o.grad_clip(), 1.0f);
  EXPECT_EQ(WorkersNeeded(spec->parallel()), 1);
}

// The spec's choice strings stay its text; the plan carries them as enums (spec_enums.h).
TEST(MakeJobPlan, TheSpecsChoicesAreTypedInThePlan) {
  absl::StatusOr<JobPlan> plan = ParseJobPlanJson(kTinySpec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->schedule(), SCHEDULE_1F1B);
  EXPECT_EQ(plan->device(), DEVICE_AUTO);
  EXPECT_EQ(plan->on_worker_loss(), WORKER_LOSS_SHRINK);
  EXPECT_EQ(plan->straggler_policy(), STRAGGLERS_REPORT);
  JobSpec spec = plan->spec();
  spec.mutable_parallel()->set_schedule("zb-h1");
  spec.set_device("cpu");
  spec.mutable_fault_tolerance()->set_on_worker_loss("wait");
  spec.mutable_stragglers()->set_policy("replace");
  plan = MakeJobPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->schedule(), SCHEDULE_ZB_H1);
  EXPECT_EQ(plan->device(), DEVICE_CPU);
  EXPECT_EQ(plan->on_worker_loss(), WORKER_LOSS_WAIT);
  EXPECT_EQ(plan->straggler_policy(), STRAGGLERS_REPLACE);
  EXPECT_EQ(plan->spec().parallel().schedule(), "zb-h1");  // the JSON text is unchanged
  spec.set_device("cuda:0");                               // a worker's --device, never a job's
  EXPECT_THAT(MakeJobPlan(spec).status().message(),
              HasSubstr("device=\"cuda:0\" is not one of cpu, cuda, auto"));
}

TEST(MakeJobPlan, MatmulPrecisionIsTheJobsAndNeedsCudaBelowFp32) {
  absl::StatusOr<JobPlan> plan = ParseJobPlanJson(kTinySpec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->spec().matmul_precision(), "fp32");  // the default, written in the plan
  EXPECT_EQ(plan->matmul_precision(), MATMUL_FP32);
  EXPECT_EQ(plan->device(), DEVICE_AUTO);

  JobSpec spec = plan->spec();
  spec.set_matmul_precision("bf16");  // with device "auto": planned for CUDA workers only
  plan = MakeJobPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->matmul_precision(), MATMUL_BF16);
  EXPECT_EQ(plan->device(), DEVICE_CUDA);
  EXPECT_EQ(plan->spec().device(), "cuda");
  EXPECT_EQ(RankPlanOf(*plan, 0).matmul_precision(), MATMUL_BF16);

  spec.set_matmul_precision("tf32");
  spec.set_device("cpu");
  EXPECT_THAT(MakeJobPlan(spec).status().message(),
              HasSubstr("matmul_precision=\"tf32\" needs device \"cuda\" (tensor cores); the "
                        "CPU computes in fp32"));
  spec.set_device("auto");
  spec.set_matmul_precision("fp16");
  EXPECT_THAT(MakeJobPlan(spec).status().message(),
              HasSubstr("matmul_precision=\"fp16\" is not one of fp32, tf32, bf16"));
  spec.set_matmul_precision("fp32");
  spec.set_device("cpu");
  plan = MakeJobPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->matmul_precision(), MATMUL_FP32);
}

TEST(MakeJobPlan, KeepsExplicitZerosOfOptionalOptimizerFields) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_optimizer()->set_grad_clip(0);
  in.mutable_optimizer()->set_weight_decay(0);
  in.mutable_optimizer()->set_min_lr_ratio(0);
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->optimizer().grad_clip(), 0.0f);
  EXPECT_EQ(spec->optimizer().weight_decay(), 0.0f);
  EXPECT_EQ(spec->optimizer().min_lr_ratio(), 0.0f);
}

TEST(MakeJobPlan, DefaultsMicroBatchToThePerReplicaBatch) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_parallel()->set_dp(4);
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->micro_batch_size(), 2);
  EXPECT_EQ(WorkersNeeded(spec->parallel()), 4);
}

TEST(MakeJobPlan, ReportsEveryProblemAtOnceWithFieldNames) {
  JobSpec in;
  in.mutable_model()->set_vocab_size(0);
  in.mutable_model()->set_context(64);
  in.mutable_model()->set_n_layer(4);
  in.mutable_model()->set_n_head(4);
  in.mutable_model()->set_n_embd(64);
  in.set_steps(0);
  in.set_batch_size(10);
  in.set_seq_len(128);
  in.set_device("tpu");
  in.mutable_optimizer()->set_beta2(1.5f);
  in.mutable_parallel()->set_dp(4);
  in.mutable_parallel()->set_pp(5);
  in.mutable_parallel()->set_tp(3);
  in.mutable_parallel()->set_schedule("zigzag");
  in.mutable_checkpoint()->set_interval_steps(-1);
  in.mutable_checkpoint()->set_keep_last(-2);
  in.mutable_checkpoint()->set_keep_every(-5);
  in.set_init_checkpoint("gpt2.safetensors");
  in.set_resume_from("ckpt/step_00000005");
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              AllOf(HasSubstr("model.vocab_size=0 must be positive"),
                    HasSubstr("optimizer.beta2=1.5 must be in [0, 1)"),
                    HasSubstr("dataset is required"), HasSubstr("steps=0 must be positive"),
                    HasSubstr("seq_len=128 exceeds model.context=64"),
                    HasSubstr("batch_size=10 is not divisible by parallel.dp=4"),
                    HasSubstr("parallel.tp=3 does not divide model.n_head=4"),
                    HasSubstr("parallel.pp=5 exceeds model.n_layer=4"),
                    HasSubstr("parallel.schedule=\"zigzag\" is not one of"),
                    HasSubstr("device=\"tpu\" is not one of cpu, cuda, auto"),
                    HasSubstr("checkpoint.interval_steps=-1 must be >= 0"),
                    HasSubstr("checkpoint.keep_last=-2 must be >= 1 (0: keep the newest 3 "
                              "sealed steps)"),
                    HasSubstr("checkpoint.keep_every=-5 must be >= 0 (0: no milestones)"),
                    HasSubstr("checkpoint.dir is required for a job on 60 workers"),
                    HasSubstr("resume_from and init_checkpoint exclude each other")));
}

TEST(ParseJobPlanJson, ReportsUnknownFieldsAndEveryOtherProblemTogether) {
  absl::StatusOr<JobSpec> spec = ParsedAndValidated(R"({
    "name": "typos", "colour": "red",
    "model": {"vocab_size": 256, "context": 64, "n_layer": 4, "n_head": 4, "n_embd": 64},
    "dataset": "/d.bin", "steps": 0, "batch_size": 8, "parallel": {"tpp": 2, "tp": 3},
    "checkpoint": {"dir": "/ckpt"}})");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              AllOf(HasSubstr("unknown field \"colour\""),
                    HasSubstr("unknown field \"parallel.tpp\" (did you mean \"tp\"?)"),
                    HasSubstr("steps=0 must be positive"),
                    HasSubstr("parallel.tp=3 does not divide model.n_head=4")));

  spec = ParsedAndValidated(R"({"colour": "red", "steps": "ten"})");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), AllOf(HasSubstr("colour"), HasSubstr("steps")));

  spec = ParsedAndValidated(kTinySpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().schedule(), "1f1b") << "defaults are filled in";
  EXPECT_EQ(spec->checkpoint().keep_last(), kDefaultKeepLast);
  EXPECT_EQ(spec->checkpoint().keep_every(), 0);
}

TEST(MakeJobPlan, JobsOnSeveralWorkersNeedACheckpointDir) {
  JobSpec in = Parsed(kTinySpec);
  in.clear_checkpoint();
  EXPECT_TRUE(Validated(in).ok()) << "one worker saves under its --data_root";
  in.mutable_parallel()->set_pp(2);
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("checkpoint.dir is required for a job on 2 workers"));
}

TEST(MakeJobPlan, EveryJobCheckpointsByDefaultAndAnExplicitZeroIsWarnedAbout) {
  JobSpec in = Parsed(kTinySpec);
  in.clear_checkpoint();  // a one-worker job with no checkpoint settings at all
  in.set_steps(500);
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().interval_steps(), kDefaultCheckpointIntervalSteps);
  EXPECT_EQ(spec->checkpoint().keep_last(), kDefaultKeepLast);
  EXPECT_EQ(CheckpointsOffWarning(*spec), std::nullopt);
  EXPECT_EQ(Validated(*spec)->SerializeAsString(), spec->SerializeAsString()) << "idempotent";

  in.mutable_checkpoint()->set_interval_steps(0);  // explicitly off: stays off, with a warning
  spec = Validated(in);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().interval_steps(), 0);
  EXPECT_THAT(CheckpointsOffWarning(*spec),
              Optional(AllOf(HasSubstr("checkpoint.interval_steps=0 turns periodic checkpoints "
                                       "off: a crash before step 500 redoes every step"),
                             HasSubstr("every 100 steps"))));
  in.set_steps(kDefaultCheckpointIntervalSteps);  // no longer than one interval: no warning
  EXPECT_EQ(CheckpointsOffWarning(*Validated(in)), std::nullopt);
}

TEST(MakeJobPlan, MissingModelIsNamed) {
  JobSpec in = Parsed(kTinySpec);
  in.clear_model();
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("model is required"));
}

TEST(MakeJobPlan, MicroBatchMustDivideThePerReplicaBatch) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_parallel()->set_dp(2);
  in.set_micro_batch_size(3);
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("micro_batch_size=3 does not divide the per-replica batch"));
}

TEST(MakeJobPlan, InterleavedNeedsVirtualStagesThatFitTheLayers) {
  JobSpec in = Parsed(kTinySpec);
  in.set_micro_batch_size(4);  // 2 micro-batches: a multiple of parallel.pp
  in.mutable_parallel()->set_pp(2);
  in.mutable_parallel()->set_schedule("interleaved");
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("parallel.virtual_stages=1 must be >= 2"));

  in.mutable_parallel()->set_virtual_stages(3);
  spec = Validated(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("parallel.pp*virtual_stages=2*3 exceeds model.n_layer=4"));

  in.mutable_parallel()->set_virtual_stages(2);
  EXPECT_TRUE(Validated(in).ok());
}

TEST(MakeJobPlan, VirtualStagesNeedTheInterleavedSchedule) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_parallel()->set_virtual_stages(2);
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("needs schedule \"interleaved\""));
}

TEST(MakeJobPlan, NegativeLayoutFactorsAreErrors) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_parallel()->set_dp(-2);
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("parallel.dp=-2 must be >= 0"));
}

TEST(MakeJobPlan, HugeLayoutsAreRejected) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_model()->set_n_layer(1000);
  in.mutable_parallel()->set_dp(1000);
  in.mutable_parallel()->set_pp(1000);
  in.set_batch_size(1000);
  absl::StatusOr<JobSpec> spec = Validated(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("exceeds 65536 workers"));
}

TEST(MakeJobPlan, IsIdempotent) {
  absl::StatusOr<JobSpec> once = Validated(Parsed(kTinySpec));
  ASSERT_TRUE(once.ok());
  absl::StatusOr<JobSpec> twice = Validated(*once);
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(once->SerializeAsString(), twice->SerializeAsString());
}

// Every rule of the plan, one spec each, with the sentence it must produce. The same table runs
// through `dtrain plan` and `dtrain submit` against a real coordinator in
// tests/integration/plan_cases.py.
struct Rule {
  const char* edit;      // JSON fields merged over kTinySpec's (top level)
  const char* sentence;  // expected in the error
};

// kTinySpec with the top-level fields of {`fields`} replacing its own.
std::string WithFields(const std::string& fields) {
  google::protobuf::Struct base, edit;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(kTinySpec, &base).ok());
  EXPECT_TRUE(
      google::protobuf::util::JsonStringToMessage(absl::StrCat("{", fields, "}"), &edit).ok())
      << fields;
  for (const auto& [key, value] : edit.fields()) (*base.mutable_fields())[key] = value;
  std::string json;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(base, &json).ok());
  return json;
}

TEST(MakeJobPlan, EveryRuleHasItsSentence) {
  const std::vector<Rule> rules = {
      {R"("steps": 0)", "steps=0 must be positive"},
      {R"("steps": 2000000000)", "steps=2000000000 exceeds 1000000000"},
      {R"("batch_size": 2147483647, "micro_batch_size": 1)",
       "batch_size=2147483647 exceeds 1048576"},
      {R"("batch_size": 1048576, "micro_batch_size": 1)",
       "micro_batch_size=1 makes 1048576 micro-batches per replica per step"},
      {R"("batch_size": 4096, "micro_batch_size": 1, "parallel": {"pp": 4, "schedule": )"
       R"("interleaved", "virtual_stages": 1000})",
       "parallel.pp*virtual_stages=4*1000 exceeds model.n_layer=4"},
      {R"("micro_batch_size": 3)", "micro_batch_size=3 does not divide the per-replica batch"},
      {R"("seq_len": 65)", "seq_len=65 exceeds model.context=64"},
      {R"("parallel": {"dp": 3})", "batch_size=8 is not divisible by parallel.dp=3"},
      {R"("parallel": {"tp": 3})", "parallel.tp=3 does not divide model.n_head=4"},
      {R"("parallel": {"pp": 5})", "parallel.pp=5 exceeds model.n_layer=4"},
      {R"("parallel": {"schedule": "zigzag"})", "parallel.schedule=\"zigzag\" is not one of"},
      {R"("parallel": {"pp": 2, "schedule": "interleaved", "virtual_stages": 2}, )"
       R"("batch_size": 6, "micro_batch_size": 2)",
       "parallel.schedule=\"interleaved\": interleaved needs micro_batches (3) to be a "
       "multiple of stages (2)"},
      {R"("parallel": {"pp": 2, "schedule": "interleaved"})",
       "parallel.virtual_stages=1 must be >= 2 for schedule \"interleaved\""},
      {R"("parallel": {"virtual_stages": 2})", "needs schedule \"interleaved\", not \"1f1b\""},
      {R"("parallel": {"pp": 2, "stage_layers": [1, 2]})",
       "parallel.stage_layers=[1, 2] sums to 3 layers, model.n_layer=4"},
      {R"("parallel": {"dp": 1000, "tp": 1000})", "exceeds 65536 workers"},
      {R"("parallel": {"dp": -1})", "parallel.dp=-1 must be >= 0"},
      {R"("device": "tpu")", "device=\"tpu\" is not one of cpu, cuda, auto"},
      {R"("checkpoint": {"interval_steps": -1})", "checkpoint.interval_steps=-1 must be >= 0"},
      {R"("checkpoint": {}, "parallel": {"pp": 2})",
       "checkpoint.dir is required for a job on 2 workers"},
      {R"("optimizer": {"beta2": 1.5})", "optimizer.beta2=1.5 must be in [0, 1)"},
      {R"("optimizer": {"lr": "Infinity"})", "optimizer.lr=inf exceeds 10"},
      {R"("optimizer": {"lr": 9.2e18})", "optimizer.lr=9.2e+18 exceeds 10"},
      {R"("optimizer": {"max_lr": "Infinity"})", "optimizer.max_lr=inf exceeds 10"},
      {R"("optimizer": {"max_lr": 1e6})", "optimizer.max_lr=1e+06 exceeds 10"},
      {R"("optimizer": {"lr": "NaN"})", "optimizer.lr=nan must be >= 0"},
      {R"("optimizer": {"weight_decay": "Infinity"})",
       "optimizer.weight_decay=inf must be finite and >= 0"},
      {R"("optimizer": {"eps": "Infinity"})", "optimizer.eps=inf must be finite and positive"},
      {R"("optimizer": {"weight_decay": 9.2e18})",
       "optimizer.weight_decay=9.2e+18 times the learning rate 0.0006 exceeds 1"},
      {R"("init_checkpoint": "a", "resume_from": "b")",
       "resume_from and init_checkpoint exclude each other"},
      {R"("dataset": "")", "dataset is required"},
  };
  for (const Rule& rule : rules) {
    const std::string json = WithFields(rule.edit);
    const absl::Time start = absl::Now();
    absl::StatusOr<JobPlan> plan = ParseJobPlanJson(json);
    EXPECT_LT(absl::Now() - start, absl::Milliseconds(100)) << json;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(plan.status().message(), HasSubstr(rule.sentence)) << json;
  }
}

TEST(MakeJobPlan, ModelSizesAreCapped) {
  absl::StatusOr<JobPlan> plan = ParseJobPlanJson(R"({"model": {"vocab_size": 2147483647,
      "context": 2147483647, "n_layer": 2147483647, "n_head": 1, "n_embd": 2147483647},
      "dataset": "d", "steps": 1, "batch_size": 1})");
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(),
              AllOf(HasSubstr("model.vocab_size=2147483647 exceeds 16777216"),
                    HasSubstr("model.context=2147483647 exceeds 1048576"),
                    HasSubstr("model.n_layer=2147483647 exceeds 4096"),
                    HasSubstr("model.n_embd=2147483647 exceeds 65536")));
}

TEST(MakeJobPlan, TheLargestAcceptedScheduleIsPlannedQuickly) {
  // 4096 micro-batches over 64 stages: 2^18 forwards simulated, the most a plan allows.
  const std::string json = R"({"model": {"vocab_size": 256, "context": 64, "n_layer": 64,
      "n_head": 4, "n_embd": 64}, "dataset": "d", "steps": 1, "batch_size": 4096,
      "micro_batch_size": 1, "checkpoint": {"dir": "/c"}, "parallel": {"pp": 64}})";
  const absl::Time start = absl::Now();
  absl::StatusOr<JobPlan> plan = ParseJobPlanJson(json);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->micro_batches(), 4096);
  EXPECT_LT(took, absl::Seconds(1));
  std::printf("plan of 4096 micro-batches over 64 stages: %.1f ms\n",
              absl::ToDoubleMilliseconds(took));
}

TEST(MakeJobPlan, CutsStagesAndCountsMicroBatches) {
  JobSpec in = Parsed(kTinySpec);
  in.set_micro_batch_size(2);
  in.mutable_parallel()->set_pp(2);
  in.mutable_parallel()->set_tp(2);
  absl::StatusOr<JobPlan> plan = MakeJobPlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->ranks(), 4);
  EXPECT_EQ(plan->micro_batches(), 4);
  ASSERT_EQ(plan->stages_size(), 2);
  EXPECT_EQ(plan->stages(0).chunks(0).first_layer(), 0);
  EXPECT_EQ(plan->stages(1).chunks(0).first_layer() + plan->stages(1).chunks(0).num_layers(), 4);
  EXPECT_EQ(plan->stages(0).peak_live_micro_batches(), 2);  // 1F1B: p - s warm-up forwards
  EXPECT_EQ(plan->stages(1).peak_live_micro_batches(), 1);
  EXPECT_GT(plan->bubble_fraction(), 0);
}

TEST(MakeJobPlan, RunsTheGivenStageLayers) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_model()->set_n_layer(6);
  in.mutable_parallel()->set_pp(3);
  for (int layers : {3, 1, 2}) in.mutable_parallel()->add_stage_layers(layers);
  absl::StatusOr<JobPlan> plan = MakeJobPlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages_size(), 3);
  EXPECT_EQ(ChunkOf(*plan, 0, 0).first_layer(), 0);
  EXPECT_EQ(ChunkOf(*plan, 0, 0).num_layers(), 3);
  EXPECT_EQ(ChunkOf(*plan, 1, 0).first_layer(), 3);
  EXPECT_EQ(ChunkOf(*plan, 1, 0).num_layers(), 1);
  EXPECT_EQ(ChunkOf(*plan, 2, 0).first_layer(), 4);
  EXPECT_EQ(ChunkOf(*plan, 2, 0).num_layers(), 2);
  // The memory estimate follows the cut: stage 0 holds 3 layers, stage 1 one.
  EXPECT_GT(plan->stages(0).memory().parameters(), plan->stages(1).memory().parameters());
  // The spec keeps its cut: planning it again gives the same plan.
  absl::StatusOr<JobPlan> again = MakeJobPlan(plan->spec());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->SerializeAsString(), plan->SerializeAsString());
  // Read from JSON as a list.
  absl::StatusOr<JobSpec> json = ParsedAndValidated(
      R"({"model": {"vocab_size": 256, "context": 64, "n_layer": 6, "n_head": 4, "n_embd": 64},
          "dataset": "d", "steps": 1, "batch_size": 2, "checkpoint": {"dir": "/c"},
          "parallel": {"pp": 3, "stage_layers": [1, 4, 1]}})");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->parallel().stage_layers(1), 4);
}

TEST(MakeJobPlan, StageLayersRulesNameTheField) {
  auto problem = [](int pp, std::vector<int> layers, std::string schedule = "1f1b") {
    JobSpec in = Parsed(kTinySpec);  // 4 layers
    in.set_batch_size(8);
    in.set_micro_batch_size(1);
    in.mutable_parallel()->set_pp(pp);
    in.mutable_parallel()->set_schedule(schedule);
    if (schedule == "interleaved") in.mutable_parallel()->set_virtual_stages(2);
    for (int l : layers) in.mutable_parallel()->add_stage_layers(l);
    absl::StatusOr<JobPlan> plan = MakeJobPlan(in);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(plan.status().message());
  };
  EXPECT_THAT(problem(2, {1, 2, 1}),
              HasSubstr("parallel.stage_layers=[1, 2, 1] has 3 entries, parallel.pp=2 stages"));
  EXPECT_THAT(problem(2, {3, 0}),
              HasSubstr("parallel.stage_layers=[3, 0]: every stage needs at least one layer"));
  EXPECT_THAT(problem(2, {2, 3}),
              HasSubstr("parallel.stage_layers=[2, 3] sums to 5 layers, model.n_layer=4"));
  EXPECT_THAT(problem(2, {2, 2}, "interleaved"),
              HasSubstr("parallel.stage_layers=[2, 2] cannot be used with schedule "
                        "\"interleaved\""));
}

TEST(MakeJobPlan, MemoryAddsUpAndShrinksWithTensorParallelismAndZero1) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_parallel()->set_dp(2);
  absl::StatusOr<JobPlan> dp2 = MakeJobPlan(in);
  ASSERT_TRUE(dp2.ok()) << dp2.status();
  const RankMemory& m = dp2->stages(0).memory();
  EXPECT_EQ(m.total(), m.parameters() + m.gradients() + m.optimizer() + m.activations() +
                           m.communication() + m.device_scratch() + m.checkpoint_snapshot());
  EXPECT_GT(m.device_scratch(), 0);  // device "auto": it may run on CUDA
  // ... or on a CPU, where a checkpoint's snapshot (rank 0's model and optimizer files) is in
  // the same memory.
  EXPECT_EQ(m.checkpoint_snapshot(), m.parameters() + m.optimizer());
  EXPECT_EQ(m.gradients(), m.parameters());
  EXPECT_EQ(m.optimizer(), 2 * m.parameters());
  EXPECT_EQ(m.communication(), 2 * (25 << 20));  // two gradient buckets

  in.mutable_parallel()->set_zero1(true);
  absl::StatusOr<JobPlan> zero1 = MakeJobPlan(in);
  ASSERT_TRUE(zero1.ok());
  EXPECT_EQ(zero1->stages(0).memory().optimizer(), m.parameters());  // 2x over dp=2

  in.mutable_parallel()->set_zero1(false);
  in.mutable_parallel()->set_tp(2);
  absl::StatusOr<JobPlan> tp2 = MakeJobPlan(in);
  ASSERT_TRUE(tp2.ok());
  EXPECT_LT(tp2->stages(0).memory().parameters(), m.parameters());
  EXPECT_LT(tp2->stages(0).memory().activations(), m.activations());
}

TEST(MakeJobPlan, FaultToleranceDefaultsAndRules) {
  absl::StatusOr<JobSpec> spec = ParsedAndValidated(kTinySpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->fault_tolerance().has_max_restarts());
  EXPECT_EQ(spec->fault_tolerance().max_restarts(), 3);
  EXPECT_EQ(spec->fault_tolerance().on_worker_loss(), "shrink");
  EXPECT_EQ(spec->fault_tolerance().wait_for(), "60s");
  EXPECT_EQ(RecoveryWaitFor(*spec), absl::Seconds(60));

  JobSpec fail_fast = Parsed(kTinySpec);
  fail_fast.mutable_fault_tolerance()->set_max_restarts(0);  // explicit 0 is kept
  ASSERT_TRUE(Validated(fail_fast).ok());
  EXPECT_EQ(Validated(fail_fast)->fault_tolerance().max_restarts(), 0);

  JobSpec bad = Parsed(kTinySpec);
  bad.mutable_fault_tolerance()->set_max_restarts(-1);
  bad.mutable_fault_tolerance()->set_on_worker_loss("pray");
  bad.mutable_fault_tolerance()->set_wait_for("soon");
  const absl::Status s = Validated(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("fault_tolerance.max_restarts=-1 must be in [0, 1000]"),
                    HasSubstr("fault_tolerance.on_worker_loss=\"pray\" is not one of wait, shrink"),
                    HasSubstr("fault_tolerance.wait_for=\"soon\" is not a duration")));
}

TEST(MakeJobPlan, PriorityIsBounded) {
  JobSpec urgent = Parsed(kTinySpec);
  urgent.set_priority(100);
  EXPECT_TRUE(Validated(urgent).ok());
  urgent.set_priority(-101);
  EXPECT_THAT(Validated(urgent).status().message(),
              HasSubstr("priority=-101 must be in [-100, 100]"));
}

TEST(MakeJobPlan, StragglerDefaultsAndRules) {
  absl::StatusOr<JobSpec> spec = ParsedAndValidated(kTinySpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->stragglers().threshold(), 1.5);
  EXPECT_EQ(spec->stragglers().window_steps(), 20);
  EXPECT_EQ(spec->stragglers().policy(), "report");

  JobSpec bad = Parsed(kTinySpec);
  bad.mutable_stragglers()->set_threshold(0.9);
  bad.mutable_stragglers()->set_window_steps(1);
  bad.mutable_stragglers()->set_policy("shoot");
  const absl::Status s = Validated(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("stragglers.threshold=0.9 must be in (1, 100]"),
                    HasSubstr("stragglers.window_steps=1 must be at least 2"),
                    HasSubstr("stragglers.policy=\"shoot\" is not one of report, replace, "
                              "rebalance")));
  bad.mutable_stragglers()->set_window_steps(-3);
  EXPECT_THAT(Validated(bad).status().message(),
              HasSubstr("stragglers.window_steps=-3 must be positive"));
}

TEST(MakeJobPlan, EvalDefaultsAndRules) {
  absl::StatusOr<JobSpec> none = ParsedAndValidated(kTinySpec);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_eval());  // no section, no evaluation, nothing defaulted

  absl::StatusOr<JobSpec> spec = ParsedAndValidated(
      absl::StrCat(std::string(kTinySpec).substr(0, std::string(kTinySpec).rfind('}')),
                   R"(, "eval": {"dataset": "/data/val.bin", "every_steps": 5,
                    "early_stopping": {"patience": 2, "min_delta": 0.01}}})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->eval().dataset(), "/data/val.bin");
  EXPECT_EQ(spec->eval().every_steps(), 5);
  EXPECT_EQ(spec->eval().batches(), 1);  // 0 -> 1
  EXPECT_EQ(spec->eval().early_stopping().patience(), 2);

  JobSpec bad = Parsed(kTinySpec);
  bad.mutable_eval()->set_every_steps(0);
  bad.mutable_eval()->set_batches(-2);
  bad.mutable_eval()->mutable_early_stopping()->set_min_delta(-1);
  absl::Status s = Validated(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      s.message(),
      AllOf(HasSubstr("eval.dataset is required"), HasSubstr("eval.every_steps=0 must be positive"),
            HasSubstr("eval.batches=-2 must be positive"),
            HasSubstr("eval.early_stopping.patience=0 must be positive"),
            HasSubstr("eval.early_stopping.min_delta=-1 must be a finite number >= 0")));

  bad = Parsed(kTinySpec);
  bad.mutable_eval()->set_dataset(bad.dataset());
  bad.mutable_eval()->set_every_steps(11);
  bad.mutable_eval()->set_batches(plan::kMaxEvalBatches + 1);
  s = Validated(bad).status();
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("eval.dataset=\"/data/tiny.bin\" is the training dataset"),
                    HasSubstr("eval.every_steps=11 exceeds steps=10"),
                    HasSubstr("eval.batches=10001 exceeds 10000")));
}

TEST(ShrinkPlan, FewerReplicasWithTheSameBatch) {
  JobSpec spec = Parsed(kTinySpec);
  spec.mutable_parallel()->set_dp(4);
  spec.mutable_parallel()->set_pp(2);
  absl::StatusOr<JobSpec> planned = Validated(spec);
  ASSERT_TRUE(planned.ok()) << planned.status();
  ASSERT_EQ(planned->micro_batch_size(), 2);  // 8 / dp=4
  // 7 workers left: dp=3 would fit them but does not divide the batch; dp=2 does.
  absl::StatusOr<JobPlan> smaller = ShrinkPlan(*planned, 7);
  ASSERT_TRUE(smaller.ok()) << smaller.status();
  EXPECT_EQ(smaller->spec().parallel().dp(), 2);
  EXPECT_EQ(smaller->spec().batch_size(), 8);
  EXPECT_EQ(smaller->spec().micro_batch_size(), 2);
  EXPECT_EQ(smaller->micro_batches(), 2);  // twice as many per replica
  EXPECT_EQ(ShrinkPlan(*planned, 2)->spec().parallel().dp(), 1);
  // One worker: one replica of pp=1 (the whole model on it).
  absl::StatusOr<JobPlan> one = ShrinkPlan(*planned, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->spec().parallel().pp(), 1);
  EXPECT_EQ(one->spec().parallel().dp(), 1);
}

TEST(ShrinkPlan, WithDpOneAnotherShapeThatFits) {
  JobSpec spec = Parsed(kTinySpec);  // 4 layers, 4 heads
  spec.mutable_parallel()->set_pp(2);
  spec.mutable_parallel()->set_tp(2);
  absl::StatusOr<JobSpec> planned = Validated(spec);
  ASSERT_TRUE(planned.ok()) << planned.status();
  // 3 workers: pp=3 x tp=1 uses them all (tp=2 fits only pp=1, 2 workers).
  absl::StatusOr<JobPlan> three = ShrinkPlan(*planned, 3);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->spec().parallel().pp(), 3);
  EXPECT_EQ(three->spec().parallel().tp(), 1);
  EXPECT_EQ(three->spec().batch_size(), 8);
  // 2 workers: pp=1 x tp=2 keeps the tensor-parallel width.
  absl::StatusOr<JobPlan> two = ShrinkPlan(*planned, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->spec().parallel().pp(), 1);
  EXPECT_EQ(two->spec().parallel().tp(), 2);
  EXPECT_EQ(ShrinkPlan(*planned, 0).status().code(), absl::StatusCode::kResourceExhausted);
  // A given cut is of the old stages: the new shape is cut by the plan.
  spec.mutable_parallel()->add_stage_layers(3);
  spec.mutable_parallel()->add_stage_layers(1);
  planned = Validated(spec);
  ASSERT_TRUE(planned.ok()) << planned.status();
  three = ShrinkPlan(*planned, 3);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->spec().parallel().pp(), 3);
  EXPECT_TRUE(three->spec().parallel().stage_layers().empty());
}

TEST(Ranks, NumberingAndNamesAreTheOneRule) {
  ParallelLayout layout;
  layout.set_dp(2);
  layout.set_pp(3);
  layout.set_tp(2);
  EXPECT_EQ(WorkersNeeded(layout), 12);
  EXPECT_EQ(WorkersNeeded(ParallelLayout()), 1);  // 0 counts as 1
  RankAssignment r;
  r.set_dp_rank(1);
  r.set_pp_rank(2);
  r.set_tp_rank(1);
  r.set_worker_id("w4");
  r.set_worker_address("127.0.0.1:7074");
  EXPECT_EQ(RankIndex(layout, r), 11);
  for (int rank = 0; rank < 12; ++rank) {
    EXPECT_EQ(RankIndex(layout, RankCoordinates(layout, rank)), rank);
  }
  EXPECT_EQ(RankLabel(RankCoordinates(layout, 11)), "dp1 pp2 tp1");
  EXPECT_EQ(ReportingRank(layout), 4);  // dp 0, last stage, tp 0
  EXPECT_EQ(RankLabel(r), "dp1 pp2 tp1");
  Placement placement;
  for (int i = 0; i < 12; ++i) *placement.add_ranks() = r;
  EXPECT_EQ(DescribeRank(placement, 11), "rank 11 (worker w4 at 127.0.0.1:7074, dp1 pp2 tp1)");
  EXPECT_EQ(DescribeRank(placement, 12), "rank 12");
}

TEST(JobLimits, ModelParametersOfGpt2Small) {
  ModelConfig m;
  m.set_vocab_size(50257);
  m.set_context(1024);
  m.set_n_layer(12);
  m.set_n_head(12);
  m.set_n_embd(768);
  EXPECT_EQ(ModelParameters(m), 124439808);  // GPT-2 small, the head tied to wte
}

TEST(JobLimits, EachCapNamesItsValueAndFlag) {
  absl::StatusOr<JobPlan> plan = ParseJobPlanJson(kTinySpec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  JobSpec spec = plan->spec();
  EXPECT_TRUE(CheckJobLimits(spec, JobLimits()).ok());
  JobLimits tight;
  tight.max_parameters = 1000;
  tight.max_steps = spec.steps() - 1;
  tight.max_workers = 0;
  const absl::Status s = CheckJobLimits(spec, tight);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            absl::StrCat("invalid job spec: model parameters=", ModelParameters(spec.model()),
                         " exceeds this coordinator's cap of 1000 "
                         "(--max_job_parameters); steps=",
                         spec.steps(), " exceeds this coordinator's cap of ", spec.steps() - 1,
                         " (--max_job_steps); parallel.dp*pp*tp=1 exceeds this "
                         "coordinator's cap of 0 (--max_job_workers)"));
  tight = JobLimits();
  tight.max_steps = spec.steps();  // at the cap is allowed
  EXPECT_TRUE(CheckJobLimits(spec, tight).ok());
}

}  // namespace
}  // namespace dtrain::plan
