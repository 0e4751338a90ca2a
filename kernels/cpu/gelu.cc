// Compiled with -ffast-math (see BUILD) so that the tanhf inside GeluTanh vectorizes into
// glibc's libmvec: 8 lanes per call (_ZGVdN8v_tanhf) on the baseline path, 16 (_ZGVeN16v_tanhf)
// on the AVX-512 one (avx512.h), instead of one scalar tanhf per element.
#include "kernels/cpu/gelu.h"

#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/common/elementwise.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/partition.h"

namespace dtrain::kernels::cpu {
namespace {

// One thread's part, [0, n) of its pointers; the same loop twice, for the two instruction sets.
void ForwardPart(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = GeluTanh(inp[i]);
}

DTRAIN_TARGET_AVX512 void ForwardPartAvx512(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = GeluTanh(inp[i]);
}

void BackwardPart(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dinp[i] = GeluTanhGrad(inp[i]) * dout[i];
}

DTRAIN_TARGET_AVX512 void BackwardPartAvx512(float* dinp, const float* inp, const float* dout,
                                             int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dinp[i] = GeluTanhGrad(inp[i]) * dout[i];
}

// Runs part(begin, end) for each of num_threads parts of [0, n), one per OpenMP thread; parts
// start at multiples of 64 elements: whole cache lines per thread.
template <typename Part>
void ForEachPart(int64_t n, int num_threads, const Part& part) {
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int t = 0; t < num_threads; ++t) {
    part(SplitPoint(n, t, num_threads, 64), SplitPoint(n, t + 1, num_threads, 64));
  }
}

}  // namespace

absl::Status GeluForward(float* out, const float* inp, int64_t n, int num_threads) {
  ArgCheck check("GeluForward");
  check.NotNull("out", out).NotNull("inp", inp).NonNegative("n", n);
  check.Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());
  const bool avx512 = UseAvx512();
  ForEachPart(n, num_threads, [&](int64_t begin, int64_t end) {
    if (avx512) {
      ForwardPartAvx512(out + begin, inp + begin, end - begin);
    } else {
      ForwardPart(out + begin, inp + begin, end - begin);
    }
  });
  return absl::OkStatus();
}

absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n,
                          int num_threads) {
  ArgCheck check("GeluBackward");
  check.NotNull("dinp", dinp).NotNull("inp", inp).NotNull("dout", dout).NonNegative("n", n);
  check.Positive("num_threads", num_threads);
  RETURN_IF_ERROR(check.status());
  const bool avx512 = UseAvx512();
  ForEachPart(n, num_threads, [&](int64_t begin, int64_t end) {
    if (avx512) {
      BackwardPartAvx512(dinp + begin, inp + begin, dout + begin, end - begin);
    } else {
      BackwardPart(dinp + begin, inp + begin, dout + begin, end - begin);
    }
  });
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cpu
