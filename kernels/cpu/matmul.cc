#include "kernels/cpu/matmul.h"

#include <cstdint>
#include <cstring>

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/partition.h"

namespace dtrain::kernels::cpu {
namespace {

ArgCheck CheckSizes(ArgCheck check, int N, int C, int OC, int num_threads) {
  check.NonNegative("N", N).Positive("C", C).Positive("OC", OC);
  check.Positive("num_threads", num_threads);
  return check;
}

}  // namespace

absl::Status MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                           int N, int C, int OC, int num_threads) {
  ArgCheck check = CheckSizes(ArgCheck("MatmulForward"), N, C, OC, num_threads);
  check.NotNull("out", out).NotNull("inp", inp).NotNull("weight", weight);
  RETURN_IF_ERROR(check.status());

  // Start every row of out at the bias, then let sgemm add inp @ weight (beta = 1).
  if (bias != nullptr) {
#pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int n = 0; n < N; ++n) {
      std::memcpy(out + int64_t{n} * OC, bias, OC * sizeof(float));
    }
  }
  ParallelSgemm(/*trans_a=*/false, /*trans_b=*/false, N, OC, C, 1.0f, inp, C, weight, OC,
                bias != nullptr ? 1.0f : 0.0f, out, OC, num_threads);
  return absl::OkStatus();
}

absl::Status MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N, int C,
                                 int OC, bool accumulate, int num_threads) {
  ArgCheck check = CheckSizes(ArgCheck("MatmulBackwardInput"), N, C, OC, num_threads);
  check.NotNull("dinp", dinp).NotNull("dout", dout).NotNull("weight", weight);
  RETURN_IF_ERROR(check.status());

  // dinp (N,C) = dout (N,OC) @ weight^T (OC,C).
  ParallelSgemm(/*trans_a=*/false, /*trans_b=*/true, N, C, OC, 1.0f, dout, OC, weight, OC,
                accumulate ? 1.0f : 0.0f, dinp, C, num_threads);
  return absl::OkStatus();
}

absl::Status MatmulBackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp,
                                  int N, int C, int OC, int num_threads) {
  ArgCheck check = CheckSizes(ArgCheck("MatmulBackwardWeight"), N, C, OC, num_threads);
  check.NotNull("dweight", dweight).NotNull("dout", dout).NotNull("inp", inp);
  RETURN_IF_ERROR(check.status());

  // dweight (C,OC) += inp^T (C,N) @ dout (N,OC).
  ParallelSgemm(/*trans_a=*/true, /*trans_b=*/false, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f,
                dweight, OC, num_threads);
  if (dbias == nullptr) return absl::OkStatus();

    // dbias (OC) += column sums of dout. Each thread owns a block of columns and walks every row,
    // so there is no race and the summation order does not depend on the thread count.
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int t = 0; t < num_threads; ++t) {
    const int begin = SplitPoint(OC, t, num_threads, 16);
    const int end = SplitPoint(OC, t + 1, num_threads, 16);
    for (int n = 0; n < N; ++n) {
      const float* row = dout + int64_t{n} * OC;
#pragma omp simd
      for (int j = begin; j < end; ++j) dbias[j] += row[j];
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
