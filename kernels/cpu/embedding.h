// Token + position embedding, the first layer of GPT-2.
//
//   forward:   out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :]
//   backward:  dwte[tokens[b,t], :] += dout[b,t,:];  dwpe[t, :] += sum_b dout[b,t,:]
//
// Errors: InvalidArgument for null pointers, B < 0, T < 0, C <= 0, num_threads < 1, and for a
// negative token (the interface does not pass V, so tokens >= V cannot be detected here).
#ifndef DTRAIN_KERNELS_CPU_EMBEDDING_H_
#define DTRAIN_KERNELS_CPU_EMBEDDING_H_

#include <cstdint>

#include "absl/status/status.h"

namespace dtrain::kernels::cpu {

// out (B,T,C), tokens (B,T) in [0,V), wte (V,C), wpe (>=T,C).
absl::Status EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                              int B, int T, int C, int num_threads);

// dwte (V,C) +=, dwpe (>=T,C) +=, dout (B,T,C), tokens (B,T).
absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                               int B, int T, int C, int num_threads);

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_EMBEDDING_H_
