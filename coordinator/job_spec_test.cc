#include "coordinator/job_spec.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kTinySpec = R"({
  "name": "tiny",
  "model": {"vocab_size": 256, "context": 64, "n_layer": 4, "n_head": 4, "n_embd": 64},
  "dataset": "/data/tiny.bin",
  "steps": 10,
  "batch_size": 8,
  "checkpoint": {"dir": "/ckpt/tiny"}
})";

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

TEST(ValidateAndDefault, FillsEveryDefault) {
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(Parsed(kTinySpec));
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
  EXPECT_EQ(WorkersNeeded(*spec), 1);
}

TEST(ValidateAndDefault, KeepsExplicitZerosOfOptionalOptimizerFields) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_optimizer()->set_grad_clip(0);
  in.mutable_optimizer()->set_weight_decay(0);
  in.mutable_optimizer()->set_min_lr_ratio(0);
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(in);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->optimizer().grad_clip(), 0.0f);
  EXPECT_EQ(spec->optimizer().weight_decay(), 0.0f);
  EXPECT_EQ(spec->optimizer().min_lr_ratio(), 0.0f);
}

TEST(ValidateAndDefault, DefaultsMicroBatchToThePerReplicaBatch) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_parallel()->set_dp(4);
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(in);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->micro_batch_size(), 2);
  EXPECT_EQ(WorkersNeeded(*spec), 4);
}

TEST(ValidateAndDefault, ReportsEveryProblemAtOnceWithFieldNames) {
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
  in.set_init_checkpoint("gpt2.safetensors");
  in.set_resume_from("ckpt/step_00000005");
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(in);
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
                    HasSubstr("checkpoint.dir is required for a job on 60 workers"),
                    HasSubstr("resume_from and init_checkpoint exclude each other")));
}

TEST(ParseAndValidateJobSpecJson, ReportsUnknownFieldsAndEveryOtherProblemTogether) {
  absl::StatusOr<JobSpec> spec = ParseAndValidateJobSpecJson(R"({
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

  spec = ParseAndValidateJobSpecJson(R"({"colour": "red", "steps": "ten"})");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), AllOf(HasSubstr("colour"), HasSubstr("steps")));

  spec = ParseAndValidateJobSpecJson(kTinySpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().schedule(), "1f1b") << "defaults are filled in";
}

TEST(ValidateAndDefault, JobsOnSeveralWorkersNeedACheckpointDir) {
  JobSpec in = Parsed(kTinySpec);
  in.clear_checkpoint();
  EXPECT_TRUE(ValidateAndDefault(in).ok()) << "one worker saves under its --data_root";
  in.mutable_parallel()->set_pp(2);
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("checkpoint.dir is required for a job on 2 workers"));
}

TEST(ValidateAndDefault, MissingModelIsNamed) {
  JobSpec in = Parsed(kTinySpec);
  in.clear_model();
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("model is required"));
}

TEST(ValidateAndDefault, MicroBatchMustDivideThePerReplicaBatch) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_parallel()->set_dp(2);
  in.set_micro_batch_size(3);
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("micro_batch_size=3 does not divide the per-replica batch"));
}

TEST(ValidateAndDefault, InterleavedNeedsVirtualStagesThatFitTheLayers) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_parallel()->set_pp(2);
  in.mutable_parallel()->set_schedule("interleaved");
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("parallel.virtual_stages=1 must be >= 2"));

  in.mutable_parallel()->set_virtual_stages(3);
  spec = ValidateAndDefault(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("parallel.pp*virtual_stages=2*3 exceeds model.n_layer=4"));

  in.mutable_parallel()->set_virtual_stages(2);
  EXPECT_TRUE(ValidateAndDefault(in).ok());
}

TEST(ValidateAndDefault, VirtualStagesNeedTheInterleavedSchedule) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_parallel()->set_virtual_stages(2);
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("needs schedule \"interleaved\""));
}

TEST(ValidateAndDefault, NegativeLayoutFactorsAreErrors) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_parallel()->set_dp(-2);
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("parallel.dp=-2 must be >= 0"));
}

TEST(ValidateAndDefault, HugeLayoutsAreRejected) {
  JobSpec in = Parsed(kTinySpec);
  in.mutable_model()->set_n_layer(1000);
  in.mutable_parallel()->set_dp(1000);
  in.mutable_parallel()->set_pp(1000);
  in.set_batch_size(1000);
  absl::StatusOr<JobSpec> spec = ValidateAndDefault(in);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("exceeds 65536 workers"));
}

TEST(ValidateAndDefault, IsIdempotent) {
  absl::StatusOr<JobSpec> once = ValidateAndDefault(Parsed(kTinySpec));
  ASSERT_TRUE(once.ok());
  absl::StatusOr<JobSpec> twice = ValidateAndDefault(*once);
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(once->SerializeAsString(), twice->SerializeAsString());
}

}  // namespace
}  // namespace dtrain::coordinator
