#include "plan/checkpoint_plan.h"

#include "absl/strings/str_cat.h"

namespace dtrain::plan {

void PlanCheckpoint(int64_t workers, CheckpointSpec* checkpoint,
                    std::vector<std::string>* problems) {
  if (!checkpoint->has_interval_steps()) {
    checkpoint->set_interval_steps(kDefaultCheckpointIntervalSteps);
  } else if (checkpoint->interval_steps() < 0) {
    problems->push_back(absl::StrCat("checkpoint.interval_steps=", checkpoint->interval_steps(),
                                     " must be >= 0 (0: only at the end; unset: every ",
                                     kDefaultCheckpointIntervalSteps, " steps)"));
  }
  if (checkpoint->keep_last() < 0) {
    problems->push_back(absl::StrCat("checkpoint.keep_last=", checkpoint->keep_last(),
                                     " must be >= 1 (0: keep the newest ", kDefaultKeepLast,
                                     " sealed steps)"));
  } else if (checkpoint->keep_last() == 0) {
    checkpoint->set_keep_last(kDefaultKeepLast);
  }
  if (checkpoint->keep_every() < 0) {
    problems->push_back(absl::StrCat("checkpoint.keep_every=", checkpoint->keep_every(),
                                     " must be >= 0 (0: no milestones)"));
  }
  if (workers > 1 && checkpoint->dir().empty()) {
    // A one-worker job saves under the worker's --data_root; ranks of a spread job write shards
    // that rank 0 exports, so they need one directory they all see.
    problems->push_back(absl::StrCat(
        "checkpoint.dir is required for a job on ", workers,
        " workers: a directory every worker of the job can write (shared storage in a cluster); "
        "each rank writes its shard there and rank 0 exports the final weights to "
        "<checkpoint.dir>/model.safetensors"));
  }
}

std::optional<std::string> CheckpointsOffWarning(const JobSpec& planned) {
  const CheckpointSpec& checkpoint = planned.checkpoint();
  if (checkpoint.interval_steps() != 0 || planned.steps() <= kDefaultCheckpointIntervalSteps) {
    return std::nullopt;
  }
  return absl::StrCat(
      "checkpoint.interval_steps=0 turns periodic checkpoints off: a crash before step ",
      planned.steps(),
      " redoes every step from the start (leave interval_steps out for a "
      "checkpoint every ",
      kDefaultCheckpointIntervalSteps, " steps)");
}

}  // namespace dtrain::plan
