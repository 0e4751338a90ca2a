#include "worker/model/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace dtrain::model {

float LearningRate(const OptimizerConfig& c, int64_t i, int64_t total_steps) {
  if (c.lr > 0.0f) return c.lr;
  if (i < c.warmup_steps) return c.max_lr * static_cast<float>(i + 1) / c.warmup_steps;
  const double min_lr = static_cast<double>(c.max_lr) * c.min_lr_ratio;
  const double ratio =
      static_cast<double>(i - c.warmup_steps) / std::max<int64_t>(1, total_steps - c.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, ratio)));
  return static_cast<float>(min_lr + coeff * (c.max_lr - min_lr));
}

float ClipScale(double grad_norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (grad_norm + 1e-6)));
}

absl::Status Validate(const OptimizerConfig& c) {
  std::vector<std::string> problems;
  if (c.lr < 0) problems.push_back(absl::StrCat("lr=", c.lr, " must be >= 0"));
  if (c.lr == 0 && c.max_lr <= 0) {
    problems.push_back(absl::StrCat("max_lr=", c.max_lr, " must be positive"));
  }
  if (c.min_lr_ratio < 0 || c.min_lr_ratio > 1) {
    problems.push_back(absl::StrCat("min_lr_ratio=", c.min_lr_ratio, " must be in [0, 1]"));
  }
  if (c.warmup_steps < 0) {
    problems.push_back(absl::StrCat("warmup_steps=", c.warmup_steps, " must be >= 0"));
  }
  if (c.weight_decay < 0) {
    problems.push_back(absl::StrCat("weight_decay=", c.weight_decay, " must be >= 0"));
  }
  if (!(c.beta1 >= 0 && c.beta1 < 1)) {
    problems.push_back(absl::StrCat("beta1=", c.beta1, " must be in [0, 1)"));
  }
  if (!(c.beta2 >= 0 && c.beta2 < 1)) {
    problems.push_back(absl::StrCat("beta2=", c.beta2, " must be in [0, 1)"));
  }
  if (!(c.eps > 0)) problems.push_back(absl::StrCat("eps=", c.eps, " must be positive"));
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid optimizer config: ", absl::StrJoin(problems, "; ")));
}

absl::StatusOr<AdamW> AdamW::Create(kernels::Backend* backend, const ParameterLayout& layout,
                                    const OptimizerConfig& config) {
  return CreateForRange(backend, layout, config, 0, layout.total_size());
}

absl::StatusOr<AdamW> AdamW::CreateForRange(kernels::Backend* backend,
                                            const ParameterLayout& layout,
                                            const OptimizerConfig& config, int64_t begin,
                                            int64_t end) {
  RETURN_IF_ERROR(Validate(config));
  if (begin < 0 || begin > end || end > layout.total_size()) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer range [", begin, ", ", end,
                                                   ") is outside the ", layout.total_size(),
                                                   " parameters"));
  }
  AdamW opt;
  opt.backend_ = backend;
  opt.layout_ = &layout;
  opt.config_ = config;
  opt.begin_ = begin;
  opt.end_ = end;
  ASSIGN_OR_RETURN(opt.m_, kernels::DeviceBuffer<float>::Create(backend, end - begin));
  ASSIGN_OR_RETURN(opt.v_, kernels::DeviceBuffer<float>::Create(backend, end - begin));
  return opt;
}

absl::Status AdamW::Step(float* params, const float* grads, float lr, float grad_scale) {
  ++step_;
  kernels::AdamWParams p;
  p.lr = lr;
  p.beta1 = config_.beta1;
  p.beta2 = config_.beta2;
  p.eps = config_.eps;
  p.step = static_cast<int>(step_);
  p.grad_scale = grad_scale;
  for (const ParameterTensor& t : layout_->tensors()) {
    // The part of tensor t inside [begin_, end_).
    const int64_t lo = std::max(t.offset, begin_);
    const int64_t hi = std::min(t.offset + t.local_size(), end_);
    if (lo >= hi) continue;
    p.weight_decay = t.weight_decay ? config_.weight_decay : 0.0f;
    RETURN_IF_ERROR(backend_->AdamWUpdate(params + lo, grads + lo, m_.data() + (lo - begin_),
                                          v_.data() + (lo - begin_), hi - lo, p));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::model
