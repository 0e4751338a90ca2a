// Matmul with bias; the weight is stored (in, out), as Hugging Face GPT-2's Conv1D.
//
//   forward:          out (N,OC) = inp (N,C) @ weight (C,OC) + bias (OC)
//   backward input:   dinp (N,C) = dout (N,OC) @ weight^T           (+= when accumulate)
//   backward weight:  dweight (C,OC) += inp^T @ dout;  dbias (OC) += sum_n dout[n]
//
// The backward pass is split in two so pipeline schedules can run the input gradient ("B") and
// the weight gradient ("W") at different times. All three are cblas_sgemm calls (gemm.h).
// Errors: InvalidArgument for null pointers (bias and dbias may be null: no bias), N < 0,
// C <= 0, OC <= 0, num_threads < 1.
#ifndef DTRAIN_KERNELS_CPU_MATMUL_H_
#define DTRAIN_KERNELS_CPU_MATMUL_H_

#include "absl/status/status.h"

namespace dtrain::kernels::cpu {

// out (N,OC), inp (N,C), weight (C,OC), bias (OC) or null.
absl::Status MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                           int N, int C, int OC, int num_threads);

// dinp (N,C), dout (N,OC), weight (C,OC). Overwrites dinp, or adds into it when `accumulate`.
absl::Status MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N, int C,
                                 int OC, bool accumulate, int num_threads);

// dweight (C,OC) +=, dbias (OC) += (null skips it), dout (N,OC), inp (N,C).
absl::Status MatmulBackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp,
                                  int N, int C, int OC, int num_threads);

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_MATMUL_H_
