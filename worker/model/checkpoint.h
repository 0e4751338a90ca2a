// Weights of a stage on disk, as safetensors with Hugging Face GPT-2 names: one tensor per
// GPT-2 parameter, matrices (in, out) as HF's Conv1D, readable by PyTorch/transformers (an
// init_checkpoint, a save_path, an export). Training state for exact resume, of one worker or
// many, is the sharded checkpoint (worker/parallel/sharded_checkpoint.h); step directories and
// `latest`: checkpoint_dir.h.
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

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_CHECKPOINT_H_
