// LocalTrainer end to end on a tiny model: resume is bit-identical, bad inputs are named errors
// and never touch what is already saved.
#include "worker/local_trainer.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/safetensors.h"
#include "worker/model/token_dataset.h"
#include "worker/testing/file_snapshot.h"
#include "worker/testing/text_corpus.h"

namespace dtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// TempDir() ends with a slash; the trainers report normalized absolute paths.
std::string TempPath(const std::string& name) {
  return absl::StrCat(absl::StripSuffix(::testing::TempDir(), "/"), "/", name);
}

std::string WriteText(const std::string& name, int bytes) {
  return dtrain::testing::WriteTextCorpus(TempPath(name), bytes);
}

TrainingRun Tiny(const std::string& data) {
  TrainingRun o;
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

absl::StatusOr<std::vector<TrainStepMetrics>> Train(
    const TrainingRun& o, std::function<void(const CheckpointWritten&)> on_checkpoint = nullptr) {
  auto backend = Cpu();
  auto trainer = LocalTrainer::Create(backend.get(), o);
  if (!trainer.ok()) return trainer.status();
  std::vector<TrainStepMetrics> steps;
  TrainingCallbacks callbacks;
  callbacks.step = [&](const TrainStepMetrics& m) {
    steps.push_back(m);
    return absl::OkStatus();
  };
  callbacks.checkpoint = std::move(on_checkpoint);
  absl::Status s = (*trainer)->Run(callbacks);
  if (!s.ok()) return s;
  return steps;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(LocalTrainer, LossFalls) {
  TrainingRun o = Tiny(WriteText("falls.txt", 4000));
  o.steps = 20;
  auto steps = Train(o);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 20u);
  EXPECT_NEAR(steps->front().loss, std::log(256.0), 0.1);  // uniform over 256 bytes at init
  EXPECT_LT(steps->back().loss, steps->front().loss - 1.0);
}

TEST(LocalTrainer, ResumeIsBitIdenticalToAnUninterruptedRun) {
  const std::string data = WriteText("resume.txt", 3000);
  TrainingRun full = Tiny(data);
  full.checkpoint_dir = TempPath("resume_ckpt");
  full.checkpoint_every = 3;
  full.save_path = TempPath("resume_full.safetensors");
  auto a = Train(full);
  ASSERT_TRUE(a.ok()) << a.status();

  TrainingRun resumed = Tiny(data);
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
}

// Tiny(data) run for its 6 steps with a checkpoint every 3 into TempPath(name).
TrainingRun CheckpointedRun(const std::string& data, const std::string& name) {
  TrainingRun o = Tiny(data);
  o.checkpoint_dir = TempPath(name);
  o.checkpoint_every = 3;
  EXPECT_TRUE(Train(o).ok());
  return o;
}

TEST(LocalTrainer, StepsNotBeyondTheCheckpointAreRefusedBeforeAnythingIsTouched) {
  const std::string data = WriteText("low_steps.txt", 3000);
  const TrainingRun o = CheckpointedRun(data, "low_steps_ckpt");
  const auto before = dtrain::testing::SnapshotFiles(o.checkpoint_dir);
  for (int64_t steps : {6, 4}) {
    TrainingRun again = Tiny(data);
    again.steps = steps;
    again.resume_from = o.checkpoint_dir;     // latest: step 6
    again.checkpoint_dir = o.checkpoint_dir;  // even writing into the same directory
    again.save_path = TempPath("low_steps.safetensors");
    auto result = Train(again);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_EQ(
        result.status().message(),
        absl::StrCat("steps=", steps, " is not beyond step 6 of the checkpoint ", o.checkpoint_dir,
                     "/step_00000006 (resume_from): there is nothing "
                     "to train; set steps above 6"));
  }
  EXPECT_EQ(dtrain::testing::SnapshotFiles(o.checkpoint_dir), before);
  EXPECT_EQ(ReadAll(o.checkpoint_dir + "/latest"), "step_00000006\n");
  EXPECT_FALSE(std::filesystem::exists(TempPath("low_steps.safetensors")));
}

TEST(LocalTrainer, ASealedStepIsNeverOverwritten) {
  const std::string data = WriteText("sealed.txt", 3000);
  const TrainingRun first = CheckpointedRun(data, "sealed_ckpt");
  auto before = dtrain::testing::SnapshotFiles(first.checkpoint_dir);
  TrainingRun second = Tiny(data);  // another job into the same directory
  second.seed = 99;
  second.checkpoint_dir = first.checkpoint_dir;
  second.checkpoint_every = 3;
  auto result = Train(second);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("will not overwrite " + first.checkpoint_dir +
                                                   "/step_00000003: it is a sealed checkpoint"));
  // Every step and `latest` as they were; only the claim (DIR/run) names the second run now.
  auto after = dtrain::testing::SnapshotFiles(first.checkpoint_dir);
  const std::string claim = first.checkpoint_dir + "/run";
  EXPECT_THAT(after[claim], ::testing::StartsWith("attempt 0 run "));
  EXPECT_NE(after[claim], before[claim]);
  before.erase(claim);
  after.erase(claim);
  EXPECT_EQ(after, before);
}

TEST(LocalTrainer, ReportsEveryStepItWritesAndNeverOneItOnlyLoaded) {
  const std::string data = WriteText("reports.txt", 3000);
  TrainingRun o = Tiny(data);
  o.checkpoint_dir = TempPath("reports_ckpt");
  o.checkpoint_every = 3;
  std::vector<CheckpointWritten> written;
  TrainingCallbacks record;
  record.checkpoint = [&](const CheckpointWritten& c) { written.push_back(c); };
  ASSERT_TRUE(Train(o, record.checkpoint).ok());
  ASSERT_EQ(written.size(), 2u);
  EXPECT_EQ(written[0].step, 3);
  EXPECT_EQ(written[0].dir, o.checkpoint_dir + "/step_00000003");
  EXPECT_TRUE(written[0].sealed);
  EXPECT_EQ(written[1].step, 6);
  EXPECT_EQ(written[1].dir, o.checkpoint_dir + "/step_00000006");
  EXPECT_TRUE(written[1].sealed);

  written.clear();
  TrainingRun resumed = Tiny(data);
  resumed.steps = 7;
  resumed.resume_from = o.checkpoint_dir + "/step_00000003";
  resumed.checkpoint_dir = TempPath("reports_resumed");
  auto backend = Cpu();
  auto trainer = LocalTrainer::Create(backend.get(), resumed);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ((*trainer)->start_step(), 3);
  EXPECT_EQ((*trainer)->resumed_from(), o.checkpoint_dir + "/step_00000003");
  ASSERT_TRUE((*trainer)->Run(record).ok());
  ASSERT_EQ(written.size(), 1u);  // step 7 only: step 3 was read, not written
  EXPECT_EQ(written[0].step, 7);
  EXPECT_EQ(written[0].dir, resumed.checkpoint_dir + "/step_00000007");
}

TEST(LocalTrainer, ADirectoryOfJobDirectoriesIsRefusedNamingThem) {
  const std::string data = WriteText("jobs.txt", 3000);
  const std::string root = TempPath("jobs_root");
  for (const char* job : {"job-000002", "job-000001"}) {
    TrainingRun o = Tiny(data);
    o.steps = 2;
    o.checkpoint_dir = root + "/" + job;
    ASSERT_TRUE(Train(o).ok());
  }
  TrainingRun r = Tiny(data);
  r.resume_from = root;
  auto result = Train(r);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(result.status().message(),
              HasSubstr(root + " holds the directories of jobs job-000001, job-000002"));
  r.resume_from = root + "/job-000002";
  EXPECT_TRUE(Train(r).ok());
}

TEST(LocalTrainer, CorruptCheckpointIsANamedErrorAndLeavesFilesAlone) {
  const std::string data = WriteText("corrupt.txt", 3000);
  TrainingRun o = Tiny(data);
  o.steps = 2;
  o.checkpoint_dir = TempPath("corrupt_ckpt");
  ASSERT_TRUE(Train(o).ok());
  const std::string step_dir = o.checkpoint_dir + "/step_00000002";
  const std::string opt_path = step_dir + "/optimizer-dp0-pp0-tp0-c0.safetensors";
  const std::string model_path = step_dir + "/model-pp0-tp0-c0.safetensors";
  std::string bytes = ReadAll(opt_path);
  {
    std::ofstream out(opt_path, std::ios::binary | std::ios::trunc);
    out << bytes.substr(0, bytes.size() / 2);  // truncated
  }
  const std::string model_before = ReadAll(model_path);
  TrainingRun r = Tiny(data);
  r.resume_from = o.checkpoint_dir;
  auto result = Train(r);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("optimizer-dp0-pp0-tp0-c0.safetensors"));
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
  TrainingRun o = Tiny(data);
  o.steps = 0;
  o.save_path = TempPath("shape_init.safetensors");
  ASSERT_TRUE(Train(o).ok());
  TrainingRun wider = Tiny(data);
  wider.model.n_embd = 32;
  wider.init_path = o.save_path;
  auto result = Train(wider);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("wte.weight"));
}

TEST(LocalTrainer, Bf16InitLoadsAndTrains) {
  const std::string data = WriteText("bf16.txt", 3000);
  TrainingRun o = Tiny(data);
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
  TrainingRun t = Tiny(data);
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
  absl::Status s = trainer->Run({[&](const TrainStepMetrics& m) {
    ++calls;
    return m.step == 2 ? absl::CancelledError("job cancelled") : absl::OkStatus();
  }});
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

// Validation is forward only: the training losses and gradient norms of a run with evaluations
// are bit-identical to the run without; val_loss appears after every eval_every-th step and the
// last, and equals a separate forward of the final weights over the same validation batches.
TEST(LocalTrainer, EvaluationIsForwardOnlyAndLeavesTrainingAlone) {
  TrainingRun plain = Tiny(WriteText("eval_train.txt", 4000));
  plain.steps = 10;
  TrainingRun evaluated = plain;
  evaluated.eval_data_path = WriteText("eval_val.txt", 3000);
  evaluated.eval_every = 4;
  evaluated.eval_batches = 3;
  auto without = Train(plain);
  ASSERT_TRUE(without.ok()) << without.status();

  auto backend = Cpu();
  auto trainer = LocalTrainer::Create(backend.get(), evaluated).value();
  std::vector<TrainStepMetrics> with;
  ASSERT_TRUE(trainer
                  ->Run({[&](const TrainStepMetrics& m) {
                    with.push_back(m);
                    return absl::OkStatus();
                  }})
                  .ok());
  ASSERT_EQ(with.size(), without->size());
  for (size_t i = 0; i < with.size(); ++i) {
    EXPECT_EQ(with[i].loss, (*without)[i].loss) << "step " << i + 1;  // bit-identical
    EXPECT_EQ(with[i].grad_norm, (*without)[i].grad_norm) << "step " << i + 1;
    EXPECT_FALSE((*without)[i].val_loss.has_value());
    const int64_t step = with[i].step;
    EXPECT_EQ(with[i].val_loss.has_value(), step == 4 || step == 8 || step == 10) << step;
  }
  // The oracle: the final weights' forward over validation batches 0..2, one at a time.
  auto data = model::TokenDataset::Open(evaluated.eval_data_path, 256).value();
  auto acts = trainer->model().NewActivations(evaluated.batch, evaluated.seq).value();
  const int n = evaluated.batch * evaluated.seq;
  std::vector<int32_t> inputs(n), targets(n);
  double sum = 0;
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(data.GetBatch(k, evaluated.batch, evaluated.seq, absl::MakeSpan(inputs),
                              absl::MakeSpan(targets))
                    .ok());
    ASSERT_TRUE(trainer->model().Forward(*acts, {inputs, targets, nullptr}).ok());
    sum += acts->MeanLoss().value();
  }
  EXPECT_NEAR(*with.back().val_loss, sum / 3, 1e-12);
  EXPECT_NE(*with[3].val_loss, *with.back().val_loss);  // the weights moved between them
  // Alone (dtrain-local --steps=0 --eval_data): the same number for the same weights.
  EXPECT_NEAR(trainer->Evaluate().value(), sum / 3, 1e-12);
}

TEST(LocalTrainer, MissingValidationDataNamesTheField) {
  TrainingRun o = Tiny(WriteText("eval_missing.txt", 4000));
  o.eval_data_path = TempPath("no_such_val.txt");
  o.eval_every = 2;
  auto backend = Cpu();
  const absl::Status s = LocalTrainer::Create(backend.get(), o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("eval.dataset " + o.eval_data_path));
}

// Early stopping: with patience 1 and a min_delta no evaluation can beat, the run stops after
// its second evaluation, flags that step, writes its checkpoint and final weights, and
// retention (keep_last 1) keeps the best evaluation's step besides the last.
TEST(LocalTrainer, EarlyStoppingEndsTheRunAndRetentionKeepsTheBestStep) {
  TrainingRun o = Tiny(WriteText("early_train.txt", 4000));
  o.steps = 30;
  o.eval_data_path = WriteText("early_val.txt", 3000);
  o.eval_every = 2;
  o.early_stopping_patience = 1;
  o.early_stopping_min_delta = 100;
  o.checkpoint_dir = TempPath("early_ckpt");
  o.checkpoint_every = 1;
  o.keep_last = 1;
  o.save_path = TempPath("early_final.safetensors");
  auto steps = Train(o);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 4u);
  EXPECT_FALSE(steps->at(1).stopped_early);
  EXPECT_TRUE(steps->back().stopped_early);
  const TrainStepMetrics& best =
      *steps->at(1).val_loss <= *steps->at(3).val_loss ? steps->at(1) : steps->at(3);
  EXPECT_EQ(steps->back().best_val_step, best.step);
  EXPECT_EQ(steps->back().best_val_loss, *best.val_loss);
  std::vector<std::string> kept;
  for (const auto& e : std::filesystem::directory_iterator(o.checkpoint_dir)) {
    const std::string name = e.path().filename().string();
    if (absl::StartsWith(name, "step_")) kept.push_back(name);
  }
  std::sort(kept.begin(), kept.end());
  std::vector<std::string> want = {absl::StrFormat("step_%08d", best.step), "step_00000004"};
  want.erase(std::unique(want.begin(), want.end()), want.end());
  EXPECT_EQ(kept, want);
  EXPECT_TRUE(std::filesystem::exists(o.save_path));
}

TEST(EarlyStopper, CountsEvaluationsWithoutAnImprovementAboveMinDelta) {
  EarlyStopper off(0, 0);  // patience 0: records the best, never stops
  EXPECT_FALSE(off.Observe(10, 3.0));
  EXPECT_FALSE(off.Observe(20, 4.0));
  EXPECT_FALSE(off.improved());
  EXPECT_EQ(off.best_step(), 10);

  EarlyStopper s(2, 0.1);
  EXPECT_FALSE(s.Observe(10, 3.0));  // the first is the best and the reference
  EXPECT_TRUE(s.improved());
  EXPECT_FALSE(s.Observe(20, 2.95));  // the lowest (kept), but within min_delta: counted, 1
  EXPECT_TRUE(s.improved());
  EXPECT_EQ(s.best_step(), 20);
  EXPECT_FALSE(s.Observe(30, 2.8));  // 0.2 below the reference 3.0: the count starts again
  EXPECT_EQ(s.best_step(), 30);
  EXPECT_EQ(s.best_loss(), 2.8);
  EXPECT_FALSE(s.Observe(40, 2.9));  // 1
  EXPECT_FALSE(s.improved());
  EXPECT_TRUE(s.Observe(50, 2.75));  // 2: within 0.1 of 2.8, though the lowest
  EXPECT_EQ(s.best_step(), 50);
  EXPECT_EQ(s.best_loss(), 2.75);
}

// A checkpoint asked for (TrainingCallbacks::checkpoint_requested: "a step after S"): the next
// step begins asked and is checkpointed; a checkpoint begun after S answers it, so it is not
// asked again until the request names a later step; without a checkpoint dir nothing is asked.
TEST(RunTrainingSteps, ACheckpointAskedForIsTakenOnceAtTheNextStep) {
  TrainingRun run;
  run.steps = 12;
  run.checkpoint_every = 10;
  run.checkpoint_dir = "/unused";
  int64_t wanted_after = -1;  // what the coordinator asks, changed after some steps below
  TrainingCallbacks callbacks;
  callbacks.checkpoint_requested = [&] { return wanted_after; };
  std::vector<int64_t> asked, started;
  callbacks.step = [&](const TrainStepMetrics& m) {
    if (m.step == 2) wanted_after = 0;  // nothing sealed yet
    if (m.step == 6) wanted_after = 3;  // its step 3 sealed, another plan asks again
    return absl::OkStatus();
  };
  CheckpointHooks hooks;
  hooks.start = [&](int64_t step, bool) {
    started.push_back(step);
    return absl::OkStatus();
  };
  hooks.finished = [](bool) { return std::vector<CheckpointWritten>(); };
  auto step = [&](int64_t step, bool checkpoint_asked) -> absl::StatusOr<TrainStepMetrics> {
    if (checkpoint_asked) asked.push_back(step);
    TrainStepMetrics m;
    m.step = step;
    m.checkpoint_requested = checkpoint_asked;  // one rank: what it was asked
    return m;
  };
  ASSERT_TRUE(RunTrainingSteps(run, 0, callbacks, step, nullptr, hooks).ok());
  EXPECT_THAT(asked, ElementsAre(3, 7));
  EXPECT_THAT(started, ElementsAre(3, 7, 10, 12));  // asked, asked, the interval, the last

  run.checkpoint_dir.clear();
  wanted_after = -1;
  asked.clear();
  ASSERT_TRUE(RunTrainingSteps(run, 0, callbacks, step, nullptr, hooks).ok());
  EXPECT_TRUE(asked.empty());
}

// The step loop with a scripted evaluation: each new best is checkpointed with keep (so
// retention keeps it), the stopping step is checkpointed and ends the run, flagged.
TEST(RunTrainingSteps, EvaluationsCheckpointTheBestAndStopEarly) {
  TrainingRun run;
  run.steps = 20;
  run.eval_every = 2;
  run.early_stopping_patience = 2;
  run.checkpoint_dir = "/unused";  // the hooks below write nothing
  const std::map<int64_t, double> val = {{2, 3.0}, {4, 2.0}, {6, 2.5}, {8, 2.6}};
  std::vector<TrainStepMetrics> reported;
  std::vector<std::pair<int64_t, bool>> started;  // (step, keep)
  TrainingCallbacks callbacks;
  callbacks.step = [&](const TrainStepMetrics& m) {
    reported.push_back(m);
    return absl::OkStatus();
  };
  CheckpointHooks hooks;
  hooks.start = [&](int64_t step, bool keep) {
    started.emplace_back(step, keep);
    return absl::OkStatus();
  };
  hooks.finished = [](bool) { return std::vector<CheckpointWritten>(); };
  ASSERT_TRUE(RunTrainingSteps(
                  run, 0, callbacks,
                  [](int64_t step, bool) -> absl::StatusOr<TrainStepMetrics> {
                    TrainStepMetrics m;
                    m.step = step;
                    return m;
                  },
                  [&](int64_t step) -> absl::StatusOr<double> { return val.at(step); }, hooks)
                  .ok());
  ASSERT_EQ(reported.size(), 8u);
  EXPECT_TRUE(reported.back().stopped_early);
  EXPECT_EQ(reported.back().best_val_step, 4);
  EXPECT_EQ(reported.back().best_val_loss, 2.0);
  EXPECT_FALSE(reported[6].val_loss.has_value());
  EXPECT_EQ(started, (std::vector<std::pair<int64_t, bool>>{{2, true}, {4, true}, {8, false}}));
}

TEST(TrainingRun, EvaluatesEveryNStepsAndTheLast) {
  TrainingRun r;
  r.steps = 25;
  EXPECT_FALSE(r.EvaluatesAt(25));  // eval_every 0: never
  r.eval_every = 10;
  std::vector<int64_t> at;
  for (int64_t s = 1; s <= 25; ++s) {
    if (r.EvaluatesAt(s)) at.push_back(s);
  }
  EXPECT_EQ(at, (std::vector<int64_t>{10, 20, 25}));
}

TEST(LocalTrainer, TheStopFlagStopsAStepInProgressBeforeItsUpdate) {
  auto backend = Cpu();
  auto trainer = LocalTrainer::Create(backend.get(), Tiny(WriteText("stopflag.txt", 3000))).value();
  std::atomic<bool> stop{false};
  trainer->set_stop_flag(&stop);
  std::vector<float> before;
  int calls = 0;
  absl::Status s = trainer->Run({[&](const TrainStepMetrics& m) {
    ++calls;
    const float* p = trainer->model().params();
    before.assign(p, p + trainer->model().layout().total_size());
    stop = true;  // as a cancel arriving while step 2 runs
    return absl::OkStatus();
  }});
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(s.message(), HasSubstr("stopped in the forward pass before layer 0 of"));
  EXPECT_EQ(calls, 1) << "step 2 never finished";
  const float* p = trainer->model().params();
  EXPECT_EQ(std::vector<float>(p, p + before.size()), before) << "no half-step update";
}

TEST(LocalTrainer, NonsenseConfigListsEveryProblem) {
  TrainingRun o = Tiny(WriteText("cfg.txt", 3000));
  o.model.n_head = 3;
  o.optimizer.beta1 = 1.5f;
  auto result = Train(o);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("n_head=3 does not divide n_embd=16"));
}

}  // namespace
}  // namespace dtrain
