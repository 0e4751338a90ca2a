// Checkpoint directories without the model: where a step lives, how it is sealed, which step a
// path names. Both checkpoint formats use it (one worker's, checkpoint.h, and the sharded one,
// worker/parallel/sharded_checkpoint.h), and so does the export, which links no training code.
//
//   DIR/step_00000042/model.safetensors      one worker's weights (metadata {"step": "42"})
//   DIR/step_00000042/optimizer.safetensors  one worker's AdamW moments, written last: the seal
//   DIR/step_00000042/manifest.json          a sharded step's manifest, written last: the seal
//   DIR/latest                               "step_00000042", moved after the seal
#ifndef DTRAIN_WORKER_MODEL_CHECKPOINT_DIR_H_
#define DTRAIN_WORKER_MODEL_CHECKPOINT_DIR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/safetensors.h"

namespace dtrain::model {

inline constexpr char kModelFileName[] = "model.safetensors";
inline constexpr char kOptimizerFileName[] = "optimizer.safetensors";  // seals a one-worker step
inline constexpr char kShardedManifestFileName[] = "manifest.json";    // seals a sharded step

// The step-directory plumbing both checkpoint formats share (one worker's, and the sharded one
// in worker/parallel/sharded_checkpoint.h): a step is written into a fresh or unsealed
// directory, sealed by one file written last (`seal_file`: optimizer.safetensors, or
// manifest.json), and only then named by `latest`.
//
// DIR/step_<step> (absolute: common/job_paths.h's StepDirName), created with its parents.
// FailedPrecondition "will not overwrite DIR/step_00000040: it is a sealed checkpoint (it has
// <seal_file>; a finished checkpoint is never rewritten)" when the seal is already there, before
// anything is touched. An unsealed step (a save that did not finish) is returned to be
// written again.
absl::StatusOr<std::string> PrepareStepDirectory(const std::string& dir, int64_t step,
                                                 absl::string_view seal_file);

// Points DIR/latest at step_<step> ("step_00000040\n"), atomically; call after the step is
// sealed.
absl::Status PointLatestAt(const std::string& dir, int64_t step);

// A checkpoint step a resume_from (or export) path names, before anything is loaded.
struct CheckpointStep {
  std::string step_dir;  // absolute
  int64_t step = 0;
};

// Resolves `path`, of either format (one worker's model.safetensors, or a sharded step's
// manifest.json): a job directory (its `latest`) or a step directory. The step comes from the
// step directory's name (step_00000035) or, for a directory named otherwise, from its files.
// Reads only. NotFound when `path` does not exist; FailedPrecondition when it holds job
// directories but no `latest` ("... holds the directories of jobs job-000001, job-000002: name
// one of them, or the job id"), or no checkpoint at all. Errors name the path.
absl::StatusOr<CheckpointStep> ResolveCheckpoint(const std::string& path);

// InvalidArgument when a run of `steps` total steps would not train beyond `checkpoint`:
// "steps=30 is not beyond step 35 of the checkpoint /abs/step_00000035 (resume_from): there
// is nothing to train; set steps above 35". Both trainers check it before loading anything.
absl::Status CheckStepsBeyond(int64_t steps, const CheckpointStep& checkpoint);

// The "step" metadata of a dtrain checkpoint file (model.safetensors, optimizer.safetensors);
// DataLoss naming the file when it has none.
absl::StatusOr<int64_t> StepOf(const SafetensorsFile& file);

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_CHECKPOINT_DIR_H_
