// LocalTrainer: trains a whole GPT-2 model in one process on one device — dtrain-local's
// engine, and the single-worker reference every parallel layout must reproduce.
//
// Step s (1-based) trains on batch k = s-1 of the dataset (llm.c order, docs/DATA_FORMATS.md):
// forward, mean cross-entropy, backward, global-norm clipping, AdamW at LearningRate(s-1).
// An evaluation (TrainingRun::EvaluatesAt) is the forward and mean cross-entropy of validation
// batches 0 .. eval_batches-1, averaged: the val_loss every parallel layout must reproduce.
#ifndef DTRAIN_WORKER_LOCAL_TRAINER_H_
#define DTRAIN_WORKER_LOCAL_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/model/config.h"
#include "worker/model/gpt_stage.h"
#include "worker/model/optimizer.h"
#include "worker/model/token_dataset.h"
#include "worker/parallel/checkpoint_writer.h"
#include "worker/parallel/final_checkpoint.h"
#include "worker/training_run.h"

namespace dtrain {

class LocalTrainer {
 public:
  // Validates everything up front (config, optimizer, data length, init file) so a bad flag
  // fails before any work, with a message naming the field or file. With resume_from, the
  // checkpoint's step is read first: `steps` not beyond it is InvalidArgument
  // (model::CheckStepsBeyond) before any tensor is loaded or file written.
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(kernels::Backend* backend,
                                                              const TrainingRun& run);

  // Runs the remaining steps (RunTrainingSteps), reporting through `callbacks`; then writes
  // save_path. Checkpoints are snapshots written and sealed by a CheckpointWriter
  // (worker/parallel/checkpoint_writer.h) while training goes on, each reported once sealed;
  // the last is waited for before Run returns.
  absl::Status Run(const TrainingCallbacks& callbacks);

  // The mean loss of the current weights over validation batches 0 .. eval_batches-1 of
  // eval_data_path (B x T each), forward only: what every evaluation of a run computes, and
  // `dtrain-local --steps=0 --eval_data` alone. FailedPrecondition without eval_data_path.
  absl::StatusOr<double> Evaluate();

  int64_t start_step() const { return start_step_; }
  // The absolute step directory this run resumed from; "" when it started fresh.
  const std::string& resumed_from() const { return resumed_from_; }
  // Why that is not the job's newest sealed step (it was damaged: model::CheckpointStep's
  // note), reported by Run as a warning; "" otherwise.
  const std::string& resume_note() const { return resume_note_; }
  model::GptStage& model() { return *model_; }
  // Stops a step in progress once `*stop` is true: Run returns Cancelled from the middle of the
  // step (model::GptStage::set_stop_flag), before its update. The flag must outlive Run.
  void set_stop_flag(const std::atomic<bool>* stop) {
    stop_ = stop;
    model_->set_stop_flag(stop);
  }
  // How long the weights' file (save_path) is written again when the disk cannot hold it
  // (parallel/final_checkpoint.h; the wait ends at once when the stop flag is set).
  parallel::FinalCheckpointRetry final_write_retry;

 private:
  LocalTrainer() = default;
  // `checkpoint_asked`: passed on as the metrics' checkpoint_requested (one rank: nothing to
  // agree with).
  absl::StatusOr<TrainStepMetrics> TrainStep(int64_t step, bool checkpoint_asked = false);
  // At a checkpoint step's boundary: the state snapshot handed to writer_ (`keep`: the best
  // validation step, kept by retention).
  absl::Status StartCheckpoint(int64_t step, bool keep);
  // save_path from the weights in memory; on a full disk, written again until it fits.
  absl::Status SaveWeights(const TrainingCallbacks& callbacks);

  kernels::Backend* backend_ = nullptr;
  TrainingRun options_;
  std::unique_ptr<model::GptStage> model_;
  std::unique_ptr<model::StageActivations> acts_;
  std::unique_ptr<model::AdamW> optimizer_;
  std::unique_ptr<model::TokenDataset> data_;
  std::unique_ptr<model::TokenDataset> eval_data_;      // with eval_every > 0
  std::unique_ptr<parallel::CheckpointWriter> writer_;  // with a checkpoint_dir, in Run
  int64_t start_step_ = 0;  // steps already done (non-zero after resume)
  std::string resumed_from_;
  std::string resume_note_;
  std::vector<std::string> damaged_steps_;  // skipped when resuming (CheckpointStep::damaged)
  const std::atomic<bool>* stop_ = nullptr;
};

}  // namespace dtrain

#endif  // DTRAIN_WORKER_LOCAL_TRAINER_H_
