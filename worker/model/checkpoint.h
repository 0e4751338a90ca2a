// Weights and training state of a stage on disk, as safetensors with Hugging Face GPT-2 names.
//
// Weights: one tensor per GPT-2 parameter, matrices (in, out) as HF's Conv1D, readable by
// PyTorch/transformers. Training state for exact resume: a directory
//   DIR/step_00000042/model.safetensors       weights, metadata {"step": "42"}
//   DIR/step_00000042/optimizer.safetensors   exp_avg.<name>, exp_avg_sq.<name>, {"step": "42"}
//   DIR/latest                                "step_00000042", rewritten last
// Every file is written to a temporary name and renamed, and `latest` moves only after both
// files of a step are complete, so a crash never leaves a half checkpoint as the latest.
#ifndef DTRAIN_WORKER_MODEL_CHECKPOINT_H_
#define DTRAIN_WORKER_MODEL_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/gpt_stage.h"
#include "worker/model/optimizer.h"

namespace dtrain::model {

// Fills the stage's parameters from a GPT-2 safetensors file (F32, BF16 or F16), taking this
// rank's shard of each tensor. Errors name the file and the tensor (missing, wrong shape/dtype).
absl::Status LoadWeights(const std::string& path, GptStage& stage);

// Writes `values` (device memory laid out like the stage's parameters: the parameters
// themselves or their gradients) as GPT-2 safetensors. Needs the whole tensors: tp size 1.
absl::Status SaveTensors(const std::string& path, GptStage& stage, const float* values,
                         const std::map<std::string, std::string>& metadata);

// Writes DIR/step_<step>/ and then DIR/latest; returns the step directory (absolute).
// FailedPrecondition naming the step directory when it is already sealed (a finished
// checkpoint is never rewritten: another job or an earlier run of this one wrote it).
absl::StatusOr<std::string> SaveTrainingState(const std::string& dir, GptStage& stage,
                                              AdamW& optimizer);

// Reads a state written by SaveTrainingState. `path` as for ResolveCheckpoint. Returns the
// step it was saved at (the optimizer's step is set to it). Reads only.
absl::StatusOr<int64_t> LoadTrainingState(const std::string& path, GptStage& stage,
                                          AdamW& optimizer);

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

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_CHECKPOINT_H_
