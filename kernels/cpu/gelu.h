// GELU, tanh approximation (GPT-2's), element-wise; the math is GeluTanh / GeluTanhGrad from
// kernels/common/elementwise.h, shared with the CUDA kernels.
//
//   forward:   out = gelu(inp)
//   backward:  dinp = gelu'(inp) * dout        (overwrites dinp)
//
// In GPT-2: inp, out, dout, dinp (B,T,4C), passed flat as n = B*T*4C elements.
// Errors: InvalidArgument for null pointers, n < 0, num_threads < 1.
#ifndef DTRAIN_KERNELS_CPU_GELU_H_
#define DTRAIN_KERNELS_CPU_GELU_H_

#include <cstdint>

#include "absl/status/status.h"

namespace dtrain::kernels::cpu {

// out (n), inp (n). out may equal inp.
absl::Status GeluForward(float* out, const float* inp, int64_t n, int num_threads);

// dinp (n), inp (n), dout (n). dinp may equal dout.
absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n,
                          int num_threads);

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_GELU_H_
