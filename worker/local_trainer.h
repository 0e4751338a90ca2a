// LocalTrainer: trains a whole GPT-2 model in one process on one device — dtrain-local's
// engine, and the single-worker reference every parallel layout must reproduce.
//
// Step s (1-based) trains on batch k = s-1 of the dataset (llm.c order, docs/DATA_FORMATS.md):
// forward, mean cross-entropy, backward, global-norm clipping, AdamW at LearningRate(s-1).
#ifndef DTRAIN_WORKER_LOCAL_TRAINER_H_
#define DTRAIN_WORKER_LOCAL_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/model/config.h"
#include "worker/model/gpt_stage.h"
#include "worker/model/optimizer.h"
#include "worker/model/token_dataset.h"

namespace dtrain {

// A checkpoint step this process finished writing (both trainers report through it).
struct CheckpointWritten {
  int64_t step = 0;
  std::string dir;      // the step directory, absolute
  bool sealed = false;  // this process sealed the step: it is complete and `latest` names it
  double seconds = 0;   // time this process spent writing it
};

struct LocalTrainingOptions {
  model::GptConfig model;
  model::OptimizerConfig optimizer;
  std::string data_path;
  std::string init_path;       // GPT-2 safetensors to start from; empty: InitializeGpt2(seed)
  uint64_t seed = 1337;
  int64_t steps = 10;          // total steps of the run (the LR schedule spans them)
  int batch = 8;               // B
  int seq = 128;               // T
  std::string resume_from;     // a job's checkpoint dir (its `latest`) or a step dir
  std::string checkpoint_dir;  // training state written here: the job's own directory
  int64_t checkpoint_every = 0;  // also every N steps; the final step is always saved
  std::string save_path;       // final weights as GPT-2 safetensors
  std::string dump_grads_path;  // gradients of the first step run, before clipping
  // Called after each checkpoint step this process wrote (not for a step only loaded).
  std::function<void(const CheckpointWritten&)> on_checkpoint;
};

struct TrainStepMetrics {
  int64_t step = 0;  // 1-based
  int64_t total_steps = 0;
  double loss = 0.0;
  double grad_norm = 0.0;  // before clipping
  float lr = 0.0f;
  double tokens_per_s = 0.0;
  double step_seconds = 0.0;
  // Where this worker's step time went (multi-worker runs; one worker: all compute). Compute:
  // kernels; communication: waiting on collectives and on sends/receives that had data to
  // move; bubble: pipeline idle time, waiting for a neighbour's activation or gradient.
  double compute_seconds = 0.0;
  double communication_seconds = 0.0;
  double bubble_seconds = 0.0;
};

class LocalTrainer {
 public:
  // Validates everything up front (config, optimizer, data length, init file) so a bad flag
  // fails before any work, with a message naming the field or file. With resume_from, the
  // checkpoint's step is read first: `steps` not beyond it is InvalidArgument
  // (model::CheckStepsBeyond) before any tensor is loaded or file written.
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(kernels::Backend* backend,
                                                              const LocalTrainingOptions& options);

  // Runs the remaining steps, calling `on_step` after each. A non-OK status from `on_step`
  // (e.g. Cancelled when the job was cancelled) stops the run after that step's checkpoint
  // and is returned.
  absl::Status Run(const std::function<absl::Status(const TrainStepMetrics&)>& on_step);

  int64_t start_step() const { return start_step_; }
  // The absolute step directory this run resumed from; "" when it started fresh.
  const std::string& resumed_from() const { return resumed_from_; }
  model::GptStage& model() { return *model_; }

 private:
  LocalTrainer() = default;
  absl::StatusOr<TrainStepMetrics> TrainStep(int64_t step);

  kernels::Backend* backend_ = nullptr;
  LocalTrainingOptions options_;
  std::unique_ptr<model::GptStage> model_;
  std::unique_ptr<model::StageActivations> acts_;
  std::unique_ptr<model::AdamW> optimizer_;
  std::unique_ptr<model::TokenDataset> data_;
  int64_t start_step_ = 0;  // steps already done (non-zero after resume)
  std::string resumed_from_;
};

}  // namespace dtrain

#endif  // DTRAIN_WORKER_LOCAL_TRAINER_H_
