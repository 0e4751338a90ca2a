// Residual connection: out = a + b, element-wise.
//
//   forward:   out = a + b                 (overwrites out)
//   backward:  da += dout;  db += dout     (both accumulate: the residual stream's gradient
//                                            and the branch's gradient are sums)
//
// In GPT-2: a, b, out (B,T,C), passed flat as n = B*T*C elements.
// Errors: InvalidArgument for null pointers, n < 0, num_threads < 1.
#ifndef DTRAIN_KERNELS_CPU_RESIDUAL_H_
#define DTRAIN_KERNELS_CPU_RESIDUAL_H_

#include <cstdint>

#include "absl/status/status.h"

namespace dtrain::kernels::cpu {

// out (n), a (n), b (n). out may equal a or b.
absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n,
                             int num_threads);

// da (n) +=, db (n) +=, dout (n).
absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t n, int num_threads);

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_RESIDUAL_H_
