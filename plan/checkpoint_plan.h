// The checkpoint settings a job runs with: the one rule (PlanCheckpoint) that fills in the
// spec's checkpoint defaults, which MakeJobPlan applies and so the coordinator, `dtrain plan`,
// the workers and dtrain-local all see the same values; and the warning SubmitJob prints when a
// spec turns periodic checkpoints off.
//
// Every job checkpoints by default, one-worker jobs included, so that a crash redoes at most
// one interval of steps:
//   checkpoint.dir             ""    -> the worker's <--data_root>/jobs/<job id>/ (one-worker
//                                       jobs; several workers must name a directory all see)
//   checkpoint.interval_steps  unset -> kDefaultCheckpointIntervalSteps; an explicit 0 keeps
//                                       only the end's checkpoint (CheckpointsOffWarning)
//   checkpoint.keep_last       0     -> kDefaultKeepLast
#ifndef DTRAIN_PLAN_CHECKPOINT_PLAN_H_
#define DTRAIN_PLAN_CHECKPOINT_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/job.pb.h"

namespace dtrain::plan {

// Steps between checkpoints when checkpoint.interval_steps is not given.
inline constexpr int64_t kDefaultCheckpointIntervalSteps = 100;

// Sealed checkpoint steps a job keeps when checkpoint.keep_last is 0 (besides milestones).
inline constexpr int kDefaultKeepLast = 3;

// Fills in `checkpoint`'s defaults (above) for a job on `workers` workers and appends each
// problem, naming its field: a negative interval_steps, keep_last or keep_every, or no dir for a
// job on more than one worker. Idempotent.
void PlanCheckpoint(int64_t workers, CheckpointSpec* checkpoint,
                    std::vector<std::string>* problems);

// For a planned spec (PlanCheckpoint applied) whose spec turned periodic checkpoints off
// (interval_steps 0) while the job is longer than the default interval: the warning SubmitJob
// returns ("checkpoint.interval_steps=0 turns periodic checkpoints off: a crash ... redoes
// every step from the start ..."). nullopt otherwise.
std::optional<std::string> CheckpointsOffWarning(const JobSpec& planned);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_CHECKPOINT_PLAN_H_
