#include "worker/training_run.h"

#include "common/status_macros.h"

namespace dtrain {

bool TrainingRun::CheckpointsAt(int64_t step) const {
  if (checkpoint_dir.empty()) return false;
  return step == steps || (checkpoint_every > 0 && step % checkpoint_every == 0);
}

absl::Status RunTrainingSteps(
    const TrainingRun& run, int64_t start_step, const TrainingCallbacks& callbacks,
    const std::function<absl::StatusOr<TrainStepMetrics>(int64_t step)>& train_step,
    const CheckpointHooks& checkpoints) {
  auto report = [&](bool wait) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<CheckpointWritten> done, checkpoints.finished(wait));
    for (const CheckpointWritten& written : done) {
      if (callbacks.checkpoint) callbacks.checkpoint(written);
    }
    return absl::OkStatus();
  };
  for (int64_t step = start_step + 1; step <= run.steps; ++step) {
    absl::StatusOr<TrainStepMetrics> trained = train_step(step);
    if (!trained.ok()) {
      // A step stopped in the middle (a cancel): the checkpoint of a step before it still seals.
      if (absl::IsCancelled(trained.status())) report(/*wait=*/true).IgnoreError();
      return trained.status();
    }
    const TrainStepMetrics& metrics = *trained;
    const absl::Status reported = callbacks.step ? callbacks.step(metrics) : absl::OkStatus();
    if (run.CheckpointsAt(step)) RETURN_IF_ERROR(checkpoints.start(step));
    // A cancelled run still keeps the step it finished.
    RETURN_IF_ERROR(report(/*wait=*/!reported.ok()));
    RETURN_IF_ERROR(reported);
  }
  return report(/*wait=*/true);
}

}  // namespace dtrain
