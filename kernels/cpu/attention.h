// Causal multi-head self-attention (without the projections, which are matmuls).
//
// qkv (B,T,3C) holds [q | k | v] per row; head h reads columns [h*hs, (h+1)*hs) of each part,
// hs = C/NH. For every (b,h), with q, k, v the (T,hs) views of that head:
//
//   forward:   att (T,T) = causal_softmax(q @ k^T / sqrt(hs))   (zeros above the diagonal)
//              out (T,hs) = att @ v                             (heads concatenated: out (B,T,C))
//   backward:  datt = dout @ v^T;  dv = att^T @ dout
//              dpreatt[t,:] = att[t,:] * (datt[t,:] - sum_u att[t,u] * datt[t,u])
//              dq = dpreatt @ k / sqrt(hs);  dk = dpreatt^T @ q / sqrt(hs)
//
// Every product is a cblas_sgemm on strided views of qkv (row stride 3C), so q, k and v are never
// copied out. The rows of the scores go in blocks of 32: row block [r0, r1) only multiplies
// columns [0, r1), so the blocks above the diagonal are skipped (10/16 of the full products at
// T = 128) and a block's scores stay in cache from its sgemm through the softmax to the next. The
// (b,h) pairs are independent and are spread over the OpenMP threads, one single-threaded sgemm
// each (see gemm.h). Errors: InvalidArgument for null pointers, B < 0, T < 0, C <= 0, NH <= 0, C %
// NH != 0, num_threads < 1.
#ifndef DTRAIN_KERNELS_CPU_ATTENTION_H_
#define DTRAIN_KERNELS_CPU_ATTENTION_H_

#include "absl/status/status.h"

namespace dtrain::kernels::cpu {

// out (B,T,C), att (B,NH,T,T) saved for the backward, qkv (B,T,3C).
absl::Status AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                              int num_threads);

// dqkv (B,T,3C) overwritten; scratch (B,NH,T,T) workspace (its contents are ignored and
// clobbered); dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) from the forward.
absl::Status AttentionBackward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                               const float* att, int B, int T, int C, int NH, int num_threads);

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_ATTENTION_H_
