// AdamW over a stage's parameter buffer, the learning-rate schedule, and global-norm clipping.
#ifndef DTRAIN_WORKER_MODEL_OPTIMIZER_H_
#define DTRAIN_WORKER_MODEL_OPTIMIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "worker/model/parameter_layout.h"

namespace dtrain::model {

struct OptimizerConfig {
  // Constant learning rate when > 0; otherwise linear warmup then cosine decay (LearningRate).
  float lr = 0.0f;
  float max_lr = 6e-4f;
  float min_lr_ratio = 0.1f;
  int warmup_steps = 0;
  float weight_decay = 0.1f;  // on tensors of 2+ dims only (nanoGPT's grouping)
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float grad_clip = 1.0f;  // max global gradient norm; <= 0 disables clipping
};

// Learning rate of 0-based step `i` of `total_steps`:
//   i < warmup: max_lr * (i+1) / warmup
//   else:       min_lr + (max_lr - min_lr) * 0.5 * (1 + cos(pi * (i-warmup) / max(1,
//   total-warmup)))
// with min_lr = max_lr * min_lr_ratio; or the constant `lr` when it is set.
float LearningRate(const OptimizerConfig& config, int64_t i, int64_t total_steps);

// torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (norm + 1e-6)); 1 when disabled.
float ClipScale(double grad_norm, float max_norm);

// Checks every field, reporting all problems at once with field names.
absl::Status Validate(const OptimizerConfig& config);

class AdamW {
 public:
  static absl::StatusOr<AdamW> Create(kernels::Backend* backend, const ParameterLayout& layout,
                                      const OptimizerConfig& config);
  // An optimizer for the elements [begin, end) of the layout's buffer only (a ZeRO-1 shard):
  // it holds end - begin moments and Step touches only that range. InvalidArgument unless
  // 0 <= begin <= end <= layout.total_size().
  static absl::StatusOr<AdamW> CreateForRange(kernels::Backend* backend,
                                              const ParameterLayout& layout,
                                              const OptimizerConfig& config, int64_t begin,
                                              int64_t end);

  // One update of every tensor (part) in the range: params -= AdamW(grads * grad_scale), decay
  // only where the layout says so. `params` and `grads` are the whole buffers, laid out like
  // the layout. Increments step().
  absl::Status Step(float* params, const float* grads, float lr, float grad_scale);

  int64_t range_begin() const { return begin_; }
  int64_t range_end() const { return end_; }

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // First and second moments of the range: element i is parameter range_begin() + i.
  kernels::DeviceBuffer<float>& exp_avg() { return m_; }
  kernels::DeviceBuffer<float>& exp_avg_sq() { return v_; }

 private:
  kernels::Backend* backend_ = nullptr;
  const ParameterLayout* layout_ = nullptr;
  OptimizerConfig config_;
  kernels::DeviceBuffer<float> m_, v_;
  int64_t begin_ = 0, end_ = 0;
  int64_t step_ = 0;
};

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_OPTIMIZER_H_
