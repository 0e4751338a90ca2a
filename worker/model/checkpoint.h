// Weights and training state of a stage on disk, as safetensors with Hugging Face GPT-2 names.
//
// Weights: one tensor per GPT-2 parameter, matrices (in, out) as HF's Conv1D, readable by
// PyTorch/transformers. Training state for exact resume: a directory
//   DIR/step_00000042/model.safetensors       weights, metadata {"step": "42"}
//   DIR/step_00000042/optimizer.safetensors   exp_avg.<name>, exp_avg_sq.<name>, {"step": "42"}
//   DIR/latest                                "step_00000042", rewritten last
// Every file is written to a temporary name and renamed, and `latest` moves only after both
// files of a step are complete, so a crash never leaves a half checkpoint as the latest. Step
// directories, `latest` and which step a path names: checkpoint_dir.h.
#ifndef DTRAIN_WORKER_MODEL_CHECKPOINT_H_
#define DTRAIN_WORKER_MODEL_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/checkpoint_dir.h"
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

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_CHECKPOINT_H_
