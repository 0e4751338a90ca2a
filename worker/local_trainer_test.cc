// LocalTrainer end to end on a tiny model: resume is bit-identical, bad inputs are named errors
// and never touch what is already saved.
#include "worker/local_trainer.h"

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/safetensors.h"
#include "worker/testing/text_corpus.h"

namespace dtrain {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

std::string WriteText(const std::string& name, int bytes) {
  return dtrain::testing::WriteTextCorpus(TempPath(name), bytes);
}

LocalTrainingOptions Tiny(const std::string& data) {
  LocalTrainingOptions o;
  o.model = {256, 16, 2, 2, 16};
  o.data_path = data;
  o.steps = 6;
  o.batch = 2;
  o.seq = 16;
  o.optimizer.max_lr = 1e-2f;
  o.optimizer.warmup_steps = 2;
  return o;
}

std::unique_ptr<kernels::Backend> Cpu() { return kernels::CreateBackend("cpu", 1).value(); }

absl::StatusOr<std::vector<TrainStepMetrics>> Train(const LocalTrainingOptions& o) {
  auto backend = Cpu();
  auto trainer = LocalTrainer::Create(backend.get(), o);
  if (!trainer.ok()) return trainer.status();
  std::vector<TrainStepMetrics> steps;
  absl::Status s = (*trainer)->Run([&](const TrainStepMetrics& m) {
    steps.push_back(m);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return steps;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(LocalTrainer, LossFalls) {
  LocalTrainingOptions o = Tiny(WriteText("falls.txt", 4000));
  o.steps = 20;
  auto steps = Train(o);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 20u);
  EXPECT_NEAR(steps->front().loss, std::log(256.0), 0.1);  // uniform over 256 bytes at init
  EXPECT_LT(steps->back().loss, steps->front().loss - 1.0);
}

TEST(LocalTrainer, ResumeIsBitIdenticalToAnUninterruptedRun) {
  const std::string data = WriteText("resume.txt", 3000);
  LocalTrainingOptions full = Tiny(data);
  full.checkpoint_dir = TempPath("resume_ckpt");
  full.checkpoint_every = 3;
  full.save_path = TempPath("resume_full.safetensors");
  auto a = Train(full);
  ASSERT_TRUE(a.ok()) << a.status();

  LocalTrainingOptions resumed = Tiny(data);
  resumed.resume_from = full.checkpoint_dir + "/step_00000003";
  resumed.save_path = TempPath("resume_resumed.safetensors");
  auto b = Train(resumed);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*b)[i].step, (*a)[3 + i].step);
    EXPECT_EQ((*b)[i].loss, (*a)[3 + i].loss) << "step " << (*b)[i].step;  // bit-identical
    EXPECT_EQ((*b)[i].grad_norm, (*a)[3 + i].grad_norm);
    EXPECT_EQ((*b)[i].lr, (*a)[3 + i].lr);
  }
  EXPECT_EQ(ReadAll(full.save_path), ReadAll(resumed.save_path));
  // The parent directory resumes from `latest`, which names the final step: nothing left to do.
  LocalTrainingOptions again = Tiny(data);
  again.resume_from = full.checkpoint_dir;
  auto c = Train(again);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->empty());
}

TEST(LocalTrainer, CorruptCheckpointIsANamedErrorAndLeavesFilesAlone) {
  const std::string data = WriteText("corrupt.txt", 3000);
  LocalTrainingOptions o = Tiny(data);
  o.steps = 2;
  o.checkpoint_dir = TempPath("corrupt_ckpt");
  ASSERT_TRUE(Train(o).ok());
  const std::string opt_path = o.checkpoint_dir + "/step_00000002/optimizer.safetensors";
  const std::string model_path = o.checkpoint_dir + "/step_00000002/model.safetensors";
  std::string bytes = ReadAll(opt_path);
  {
    std::ofstream out(opt_path, std::ios::binary | std::ios::trunc);
    out << bytes.substr(0, bytes.size() / 2);  // truncated
  }
  const std::string model_before = ReadAll(model_path);
  LocalTrainingOptions r = Tiny(data);
  r.resume_from = o.checkpoint_dir;
  auto result = Train(r);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("optimizer.safetensors"));
  EXPECT_EQ(ReadAll(model_path), model_before);
  EXPECT_EQ(ReadAll(o.checkpoint_dir + "/latest"), "step_00000002\n");
}

TEST(LocalTrainer, DataShorterThanOneBatchIsNamed) {
  auto result = Train(Tiny(WriteText("short.txt", 20)));  // needs B*T+1 = 33 tokens
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("short.txt"));
}

TEST(LocalTrainer, MissingDataFileIsNotFound) {
  auto result = Train(Tiny(TempPath("does_not_exist.txt")));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(result.status().message(), HasSubstr("does_not_exist.txt"));
}

TEST(LocalTrainer, InitWithAWrongShapeNamesTheTensor) {
  const std::string data = WriteText("shape.txt", 3000);
  LocalTrainingOptions o = Tiny(data);
  o.steps = 0;
  o.save_path = TempPath("shape_init.safetensors");
  ASSERT_TRUE(Train(o).ok());
  LocalTrainingOptions wider = Tiny(data);
  wider.model.n_embd = 32;
  wider.init_path = o.save_path;
  auto result = Train(wider);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("wte.weight"));
}

TEST(LocalTrainer, Bf16InitLoadsAndTrains) {
  const std::string data = WriteText("bf16.txt", 3000);
  LocalTrainingOptions o = Tiny(data);
  o.steps = 0;
  o.save_path = TempPath("fp32_init.safetensors");
  ASSERT_TRUE(Train(o).ok());
  // Re-encode every tensor as bf16.
  auto f32 = model::SafetensorsFile::Open(o.save_path).value();
  std::vector<std::vector<float>> values;
  std::vector<model::TensorToWrite> tensors;
  std::vector<std::string> names = f32.names();
  values.reserve(names.size());
  for (const std::string& name : names) {
    const model::TensorInfo* info = f32.Find(name);
    values.emplace_back(info->num_elements());
    ASSERT_TRUE(f32.ReadFloat32(name, info->shape, absl::MakeSpan(values.back())).ok());
    tensors.push_back({name, info->shape, values.back()});
  }
  const std::string bf16 = TempPath("bf16_init.safetensors");
  ASSERT_TRUE(model::WriteSafetensors(bf16, tensors, {}, model::DType::kBF16).ok());
  LocalTrainingOptions t = Tiny(data);
  t.init_path = bf16;
  t.steps = 2;
  auto result = Train(t);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_NEAR(result->front().loss, std::log(256.0), 0.1);
}

TEST(LocalTrainer, AnErrorFromTheStepCallbackStopsTheRun) {
  auto backend = Cpu();
  auto trainer = LocalTrainer::Create(backend.get(), Tiny(WriteText("stop.txt", 3000))).value();
  int calls = 0;
  absl::Status s = trainer->Run([&](const TrainStepMetrics& m) {
    ++calls;
    return m.step == 2 ? absl::CancelledError("job cancelled") : absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

TEST(LocalTrainer, NonsenseConfigListsEveryProblem) {
  LocalTrainingOptions o = Tiny(WriteText("cfg.txt", 3000));
  o.model.n_head = 3;
  o.optimizer.beta1 = 1.5f;
  auto result = Train(o);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("n_head=3 does not divide n_embd=16"));
}

}  // namespace
}  // namespace dtrain
