#include "worker/model/parameter_layout.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::model {
namespace {

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

class LayoutBuilder {
 public:
  explicit LayoutBuilder(int tp_size) : tp_size_(tp_size) {}

  void Add(std::string name, std::vector<int64_t> shape, ShardKind shard, int parts, float init_std,
           float init_value) {
    ParameterTensor t;
    t.name = std::move(name);
    t.global_shape = shape;
    t.local_shape = shape;
    if (shard == ShardKind::kColumns) t.local_shape.back() /= tp_size_;
    if (shard == ShardKind::kRows) t.local_shape.front() /= tp_size_;
    t.shard = tp_size_ == 1 ? ShardKind::kReplicated : shard;
    t.parts = parts;
    t.weight_decay = shape.size() >= 2;
    t.init_std = init_std;
    t.init_value = init_value;
    t.offset = total_;
    total_ += t.local_size();
    tensors_.push_back(std::move(t));
  }
  std::vector<ParameterTensor> tensors_;
  int64_t total_ = 0;

 private:
  int tp_size_;
};

}  // namespace

int64_t ParameterTensor::local_size() const { return Product(local_shape); }
int64_t ParameterTensor::global_size() const { return Product(global_shape); }

absl::StatusOr<ParameterLayout> ParameterLayout::Create(const GptConfig& config,
                                                        const StageSpec& stage,
                                                        const TensorParallelSpec& tp) {
  RETURN_IF_ERROR(Validate(config));
  if (stage.first_layer < 0 || stage.num_layers < 0 ||
      stage.first_layer + stage.num_layers > config.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage layers [", stage.first_layer, ", ", stage.first_layer + stage.num_layers,
        ") are outside the model's n_layer=", config.n_layer));
  }
  if (tp.size <= 0 || tp.rank < 0 || tp.rank >= tp.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel rank ", tp.rank, " of size ", tp.size, " is invalid"));
  }
  if (config.n_head % tp.size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp=", tp.size, " does not divide n_head=", config.n_head));
  }
  const int64_t C = config.n_embd;
  // GPT-2 init: normal(0, 0.02); residual projections scaled by 1/sqrt(2L).
  const float std = 0.02f;
  const float proj_std = 0.02f / std::sqrt(2.0f * config.n_layer);
  LayoutBuilder b(tp.size);
  if (stage.has_embedding) {
    b.Add("wte.weight", {config.vocab_size, C}, ShardKind::kReplicated, 1, std, 0);
    b.Add("wpe.weight", {config.context, C}, ShardKind::kReplicated, 1, std, 0);
  }
  for (int l = stage.first_layer; l < stage.first_layer + stage.num_layers; ++l) {
    const std::string p = absl::StrCat("h.", l, ".");
    b.Add(p + "ln_1.weight", {C}, ShardKind::kReplicated, 1, 0, 1);
    b.Add(p + "ln_1.bias", {C}, ShardKind::kReplicated, 1, 0, 0);
    b.Add(p + "attn.c_attn.weight", {C, 3 * C}, ShardKind::kColumns, 3, std, 0);
    b.Add(p + "attn.c_attn.bias", {3 * C}, ShardKind::kColumns, 3, 0, 0);
    b.Add(p + "attn.c_proj.weight", {C, C}, ShardKind::kRows, 1, proj_std, 0);
    b.Add(p + "attn.c_proj.bias", {C}, ShardKind::kReplicated, 1, 0, 0);
    b.Add(p + "ln_2.weight", {C}, ShardKind::kReplicated, 1, 0, 1);
    b.Add(p + "ln_2.bias", {C}, ShardKind::kReplicated, 1, 0, 0);
    b.Add(p + "mlp.c_fc.weight", {C, 4 * C}, ShardKind::kColumns, 1, std, 0);
    b.Add(p + "mlp.c_fc.bias", {4 * C}, ShardKind::kColumns, 1, 0, 0);
    b.Add(p + "mlp.c_proj.weight", {4 * C, C}, ShardKind::kRows, 1, proj_std, 0);
    b.Add(p + "mlp.c_proj.bias", {C}, ShardKind::kReplicated, 1, 0, 0);
  }
  if (stage.has_head) {
    b.Add("ln_f.weight", {C}, ShardKind::kReplicated, 1, 0, 1);
    b.Add("ln_f.bias", {C}, ShardKind::kReplicated, 1, 0, 0);
    // The head is tied to wte; a last stage without the embedding keeps its own copy, whose
    // gradient is summed with the first stage's.
    if (!stage.has_embedding) {
      b.Add("wte.weight", {config.vocab_size, C}, ShardKind::kReplicated, 1, std, 0);
    }
  }
  ParameterLayout layout;
  layout.tensors_ = std::move(b.tensors_);
  layout.total_size_ = b.total_;
  return layout;
}

const ParameterTensor* ParameterLayout::Find(absl::string_view name) const {
  for (const ParameterTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::vector<TensorBox> ShardBoxes(const ParameterTensor& t, const TensorParallelSpec& tp) {
  const std::vector<int64_t> zero(t.global_shape.size(), 0);
  switch (t.shard) {
    case ShardKind::kReplicated:
      return {{zero, t.global_shape}};
    case ShardKind::kRows: {
      TensorBox box{zero, t.global_shape};
      box.size.front() = t.local_shape.front();
      box.offset.front() = tp.rank * box.size.front();
      return {box};
    }
    case ShardKind::kColumns: {
      const int64_t block = t.global_shape.back() / t.parts;
      const int64_t w = block / tp.size;
      std::vector<TensorBox> boxes;
      for (int p = 0; p < t.parts; ++p) {
        TensorBox box{zero, t.global_shape};
        box.size.back() = w;
        box.offset.back() = p * block + tp.rank * w;
        boxes.push_back(box);
      }
      return boxes;
    }
  }
  return {};
}

namespace {

// Calls copy(global_offset, local_offset, n) for each contiguous run of floats that rank
// tp.rank holds of `t`, in local order. Columns: row r of the global tensor is `parts` blocks
// of `block` columns, and this rank holds columns [rank*w, (rank+1)*w) of each block,
// w = block / tp.size. Rows: one run. Replicated: the whole tensor.
template <typename Copy>
absl::Status ForEachShardRun(absl::string_view op, const ParameterTensor& t,
                             const TensorParallelSpec& tp, int64_t global_size, int64_t local_size,
                             Copy copy) {
  if (global_size != t.global_size() || local_size != t.local_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, "(", t.name, "): sizes ", global_size, "/", local_size));
  }
  switch (t.shard) {
    case ShardKind::kReplicated:
      copy(0, 0, local_size);
      return absl::OkStatus();
    case ShardKind::kRows:
      copy(tp.rank * local_size, 0, local_size);
      return absl::OkStatus();
    case ShardKind::kColumns: {
      const int64_t global_cols = t.global_shape.back();
      const int64_t rows = t.global_size() / global_cols;
      const int64_t block = global_cols / t.parts;
      const int64_t w = block / tp.size;
      int64_t local_offset = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int p = 0; p < t.parts; ++p) {
          copy(r * global_cols + p * block + tp.rank * w, local_offset, w);
          local_offset += w;
        }
      }
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown shard kind");
}

}  // namespace

absl::Status ExtractShard(const ParameterTensor& t, const TensorParallelSpec& tp,
                          absl::Span<const float> global, absl::Span<float> local) {
  return ForEachShardRun("ExtractShard", t, tp, global.size(), local.size(),
                         [&](int64_t g, int64_t l, int64_t n) {
                           std::memcpy(local.data() + l, global.data() + g, n * sizeof(float));
                         });
}

absl::Status InsertShard(const ParameterTensor& t, const TensorParallelSpec& tp,
                         absl::Span<const float> local, absl::Span<float> global) {
  return ForEachShardRun("InsertShard", t, tp, global.size(), local.size(),
                         [&](int64_t g, int64_t l, int64_t n) {
                           std::memcpy(global.data() + g, local.data() + l, n * sizeof(float));
                         });
}

}  // namespace dtrain::model
