// The optimizer step: global-norm clipping (SquaredNorm over every gradient, then the scale
// goes into AdamWParams::grad_scale, or Scale on the gradients) and the AdamW update.
//
//   AdamWUpdate, per element (torch.optim.AdamW, decoupled weight decay; AdamWElement in
//   kernels/common/elementwise.h):
//     g = grads * grad_scale
//     params *= 1 - lr * weight_decay
//     m = beta1 m + (1 - beta1) g;    v = beta2 v + (1 - beta2) g^2
//     params -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//   SquaredNorm:  sum_i x[i]^2, accumulated in double
//   Scale:        x *= s
//
// Errors: InvalidArgument for null pointers, n < 0, step < 1, num_threads < 1.
#ifndef DTRAIN_KERNELS_CPU_ADAMW_H_
#define DTRAIN_KERNELS_CPU_ADAMW_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace dtrain::kernels::cpu {

// params (n), grads (n), m (n), v (n): params, m, v updated in place.
absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                         const AdamWParams& p, int num_threads);

// x (n). Deterministic for a given thread count: per-thread partial sums, added in order.
absl::StatusOr<double> SquaredNorm(const float* x, int64_t n, int num_threads);

// x (n) *= s.
absl::Status Scale(float* x, float s, int64_t n, int num_threads);

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_ADAMW_H_
