// Causal multi-head self-attention on the GPU: cuBLAS strided-batched GEMMs over the NH heads of
// each batch element, and our own causal softmax (forward and backward), one warp per row.
//
// qkv (B,T,3C) holds [q | k | v]; head h of q is columns [h*hs, (h+1)*hs) of each row of width
// 3C, so consecutive heads are `hs` floats apart: one strided-batched GEMM per batch element b
// covers its NH heads.
#ifndef DTRAIN_KERNELS_CUDA_ATTENTION_CUH_
#define DTRAIN_KERNELS_CUDA_ATTENTION_CUH_

#include "absl/status/status.h"
#include "kernels/cuda/matmul.cuh"

namespace dtrain::kernels::cuda {

// att (B,NH,T,T) = softmax(q k^T / sqrt(hs)) with the causal mask: entries above the diagonal
// are exactly 0. out (B,T,C) = att @ v, heads concatenated. C % NH == 0.
absl::Status AttentionForward(const GemmContext& ctx, float* out, float* att, const float* qkv,
                              int B, int T, int C, int NH);

// dqkv (B,T,3C) overwritten (every element written, nothing read); scratch (B,NH,T,T) is
// workspace, its contents afterwards unspecified; att is AttentionForward's att.
absl::Status AttentionBackward(const GemmContext& ctx, float* dqkv, float* scratch,
                               const float* dout, const float* qkv, const float* att, int B, int T,
                               int C, int NH);

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_ATTENTION_CUH_
