// ParameterLayout: which GPT-2 tensors one worker holds, their shapes on that worker, and where
// they live in its one contiguous parameter buffer (gradients and optimizer state use the same
// offsets, so a bucket or a ZeRO shard is a plain range).
//
// A worker holds a pipeline *stage* (a range of layers, the embedding on the first stage, the
// final LayerNorm and tied head on the last) and one tensor-parallel *shard* of each block
// (Megatron: c_attn and c_fc split by columns, attn.c_proj and mlp.c_proj by rows).
// Tensor names are Hugging Face GPT-2's, so checkpoints map tensor for tensor.
#ifndef DTRAIN_WORKER_MODEL_PARAMETER_LAYOUT_H_
#define DTRAIN_WORKER_MODEL_PARAMETER_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/model/config.h"

namespace dtrain::model {

// A range of layers [first_layer, first_layer + num_layers) and the ends of the model it owns.
struct StageSpec {
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = true;  // first stage: wte + wpe
  bool has_head = true;       // last stage: ln_f + the head tied to wte
};

// Tensor-parallel position of this worker: rank in [0, size).
struct TensorParallelSpec {
  int rank = 0;
  int size = 1;
};

enum class ShardKind {
  kReplicated,  // every tp rank holds the whole tensor
  kColumns,     // split along the last dim; `parts` blocks ([q|k|v] has 3) split separately
  kRows,        // split along the first dim
};

struct ParameterTensor {
  std::string name;                   // "h.3.attn.c_attn.weight"
  std::vector<int64_t> global_shape;  // as in a full checkpoint
  std::vector<int64_t> local_shape;   // as held by this worker
  ShardKind shard = ShardKind::kReplicated;
  int parts = 1;
  bool weight_decay = false;  // AdamW decay: tensors of 2+ dims
  float init_std = 0.0f;      // normal(0, init_std) when > 0, else the constant init_value
  float init_value = 0.0f;
  int64_t offset = 0;  // first element in the worker's parameter buffer

  int64_t local_size() const;
  int64_t global_size() const;
};

class ParameterLayout {
 public:
  // InvalidArgument when the stage is outside the model or tp does not divide the heads or 4C.
  static absl::StatusOr<ParameterLayout> Create(const GptConfig& config, const StageSpec& stage,
                                                const TensorParallelSpec& tp);

  const std::vector<ParameterTensor>& tensors() const { return tensors_; }
  int64_t total_size() const { return total_size_; }
  // Null when this worker does not hold `name`.
  const ParameterTensor* Find(absl::string_view name) const;

 private:
  std::vector<ParameterTensor> tensors_;
  int64_t total_size_ = 0;
};

// A box of a global tensor: elements [offset[d], offset[d] + size[d]) of each dim d.
struct TensorBox {
  std::vector<int64_t> offset, size;
};

// Where rank tp.rank's shard of `t` sits in the global tensor: boxes that, concatenated along
// the last dim in order, make the local tensor. Replicated: the whole tensor; rows: one box of
// rows; columns: one box of columns per part (c_attn's q, k and v blocks are split separately,
// so its shard is 3 boxes). What checkpoints store to be resumable on any tp
// (worker/parallel/manifest.h).
std::vector<TensorBox> ShardBoxes(const ParameterTensor& t, const TensorParallelSpec& tp);

// Copies this rank's shard of `t` out of the whole tensor `global` into `local`.
absl::Status ExtractShard(const ParameterTensor& t, const TensorParallelSpec& tp,
                          absl::Span<const float> global, absl::Span<float> local);

// The inverse: copies this rank's shard `local` into its place in the whole tensor `global`
// (a replicated tensor is copied whole). Calling it for every tp rank rebuilds the tensor.
absl::Status InsertShard(const ParameterTensor& t, const TensorParallelSpec& tp,
                         absl::Span<const float> local, absl::Span<float> global);

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_PARAMETER_LAYOUT_H_
