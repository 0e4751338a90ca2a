// Fused softmax + cross-entropy on the GPU: one block per row of logits.
#ifndef DTRAIN_KERNELS_CUDA_CROSS_ENTROPY_CUH_
#define DTRAIN_KERNELS_CUDA_CROSS_ENTROPY_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace dtrain::kernels::cuda {

// probs (N,V) = softmax(logits (N,V)); losses (N) = -log probs[n, targets[n]], computed as
// log(sum) + max - logits[n, target] (no underflow for tiny probabilities). The row's max and sum
// come from one pass (online softmax). targets are read on the device and not validated by the
// launcher: a target outside [0,V) gives a NaN loss for its row. probs may equal logits.
absl::Status CrossEntropyForward(float* losses, float* probs, const float* logits,
                                 const int32_t* targets, int N, int V, cudaStream_t stream);

// dlogits (N,V) = (probs - onehot(targets)) * dloss, overwritten. dlogits may equal probs.
absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                  float dloss, int N, int V, cudaStream_t stream);

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_CROSS_ENTROPY_CUH_
