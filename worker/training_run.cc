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
    const std::function<absl::StatusOr<CheckpointWritten>(int64_t step)>& save) {
  for (int64_t step = start_step + 1; step <= run.steps; ++step) {
    ASSIGN_OR_RETURN(TrainStepMetrics metrics, train_step(step));
    const absl::Status reported = callbacks.step ? callbacks.step(metrics) : absl::OkStatus();
    // A cancelled run still keeps the step it finished.
    if (run.CheckpointsAt(step)) {
      ASSIGN_OR_RETURN(CheckpointWritten written, save(step));
      if (callbacks.checkpoint) callbacks.checkpoint(written);
    }
    RETURN_IF_ERROR(reported);
  }
  return absl::OkStatus();
}

}  // namespace dtrain
