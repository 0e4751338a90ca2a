#include "worker/training_run.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain {

bool TrainingRun::CheckpointsAt(int64_t step) const {
  if (checkpoint_dir.empty()) return false;
  return step == steps || (checkpoint_every > 0 && step % checkpoint_every == 0);
}

bool TrainingRun::EvaluatesAt(int64_t step) const {
  return eval_every > 0 && (step % eval_every == 0 || step == steps);
}

absl::StatusOr<std::unique_ptr<model::TokenDataset>> OpenEvalData(const TrainingRun& run) {
  auto named = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("eval.dataset ", run.eval_data_path, ": ", s.message()));
  };
  absl::StatusOr<model::TokenDataset> data =
      model::TokenDataset::Open(run.eval_data_path, run.model.vocab_size);
  if (!data.ok()) return named(data.status());
  const absl::Status batches = data->BatchesPerEpoch(run.batch, run.seq).status();
  if (!batches.ok()) return named(batches);
  return std::make_unique<model::TokenDataset>(*std::move(data));
}

bool EarlyStopper::Observe(int64_t step, double val_loss) {
  improved_ = best_step_ == 0 || val_loss < best_loss_;
  if (improved_) {
    best_step_ = step;
    best_loss_ = val_loss;
  }
  if (!has_reference_ || val_loss < reference_loss_ - min_delta_) {
    has_reference_ = true;
    reference_loss_ = val_loss;
    since_reference_ = 0;
    return false;
  }
  ++since_reference_;
  return patience_ > 0 && since_reference_ >= patience_;
}

absl::Status RunTrainingSteps(
    const TrainingRun& run, int64_t start_step, const TrainingCallbacks& callbacks,
    const std::function<absl::StatusOr<TrainStepMetrics>(int64_t step, bool checkpoint_asked)>&
        train_step,
    const std::function<absl::StatusOr<double>(int64_t step)>& evaluate,
    const CheckpointHooks& checkpoints) {
  auto report = [&](bool wait) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<CheckpointWritten> done, checkpoints.finished(wait));
    for (const CheckpointWritten& written : done) {
      if (callbacks.checkpoint) callbacks.checkpoint(written);
    }
    return absl::OkStatus();
  };
  EarlyStopper stopping(run.early_stopping_patience, run.early_stopping_min_delta);
  int64_t last_begun = start_step;  // the newest checkpoint begun (or resumed from)
  for (int64_t step = start_step + 1; step <= run.steps; ++step) {
    const int64_t wanted_after =
        callbacks.checkpoint_requested ? callbacks.checkpoint_requested() : -1;
    const bool asked = !run.checkpoint_dir.empty() && wanted_after >= last_begun;
    absl::StatusOr<TrainStepMetrics> trained = train_step(step, asked);
    if (!trained.ok()) {
      // A step stopped in the middle (a cancel): the checkpoint of a step before it still seals.
      if (absl::IsCancelled(trained.status())) report(/*wait=*/true).IgnoreError();
      return trained.status();
    }
    TrainStepMetrics metrics = *std::move(trained);
    bool best = false;
    if (run.EvaluatesAt(step) && evaluate) {
      ASSIGN_OR_RETURN(const double val_loss, evaluate(step));
      metrics.val_loss = val_loss;
      metrics.stopped_early = stopping.Observe(step, val_loss) && step < run.steps;
      best = stopping.improved();
    }
    metrics.best_val_step = stopping.best_step();
    metrics.best_val_loss = stopping.best_loss();
    const absl::Status reported = callbacks.step ? callbacks.step(metrics) : absl::OkStatus();
    if (!run.checkpoint_dir.empty() && (run.CheckpointsAt(step) || best || metrics.stopped_early ||
                                        metrics.checkpoint_requested)) {
      RETURN_IF_ERROR(checkpoints.start(step, best));
      last_begun = step;
    }
    // A cancelled run still keeps the step it finished.
    RETURN_IF_ERROR(report(/*wait=*/!reported.ok() || metrics.stopped_early));
    RETURN_IF_ERROR(reported);
    if (metrics.stopped_early) break;
  }
  return report(/*wait=*/true);
}

}  // namespace dtrain
