// Token + position embedding on the GPU.
#ifndef DTRAIN_KERNELS_CUDA_EMBEDDING_CUH_
#define DTRAIN_KERNELS_CUDA_EMBEDDING_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace dtrain::kernels::cuda {

// out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens (B,T) in [0,V) (not checked on the device:
// the launcher does not know V); wte (V,C); wpe (>=T,C).
absl::Status EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                              int B, int T, int C, cudaStream_t stream);

// dwte[tokens[b,t]] += dout[b,t]; dwpe[t] += sum_b dout[b,t]. dout (B,T,C).
//
// Deterministic, no atomics: each element of dwte and dwpe is updated by one thread, which adds
// its contributions in (b,t) order, the order of the CPU's plain loop. For dwte, warp w of
// column tile x owns the vocabulary rows v with v % kBuckets == w % kBuckets and scans all B*T
// tokens, so repeated tokens sum in sequence instead of racing.
absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                               int B, int T, int C, cudaStream_t stream);

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_EMBEDDING_CUH_
