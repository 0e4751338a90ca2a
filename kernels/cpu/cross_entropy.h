// Fused softmax + cross-entropy over the vocabulary, the loss of GPT-2.
//
//   forward:   probs[n,:] = softmax(logits[n,:]);  losses[n] = -log probs[n, targets[n]]
//   backward:  dlogits[n,:] = (probs[n,:] - onehot(targets[n])) * dloss      (overwrites)
//
// dloss is the same for every row: the gradient of the reduced loss with respect to each row's
// loss, e.g. 1/N for a mean. N = B*T rows.
// Errors: InvalidArgument for null pointers, N < 0, V <= 0, num_threads < 1, and for a target
// outside [0, V).
#ifndef DTRAIN_KERNELS_CPU_CROSS_ENTROPY_H_
#define DTRAIN_KERNELS_CPU_CROSS_ENTROPY_H_

#include <cstdint>

#include "absl/status/status.h"

namespace dtrain::kernels::cpu {

// losses (N), probs (N,V), logits (N,V), targets (N) in [0,V).
absl::Status CrossEntropyForward(float* losses, float* probs, const float* logits,
                                 const int32_t* targets, int N, int V, int num_threads);

// dlogits (N,V), probs (N,V), targets (N).
absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                  float dloss, int N, int V, int num_threads);

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_CROSS_ENTROPY_H_
