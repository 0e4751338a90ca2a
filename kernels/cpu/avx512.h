// Running a loop with AVX-512 where the CPU has it, while the build targets x86-64-v3 (AVX2) so
// the binaries run on every CI machine. A kernel compiles its inner loop twice, once plain and
// once under DTRAIN_TARGET_AVX512, and picks one per call with UseAvx512(). What it gains: with
// -ffast-math, libmvec's 16-lane tanhf (_ZGVeN16v_tanhf) instead of the 8-lane AVX2 one, half
// the calls; the results differ from the AVX2 path by rounding only (a few ulp).
#ifndef DTRAIN_KERNELS_CPU_AVX512_H_
#define DTRAIN_KERNELS_CPU_AVX512_H_

#include <atomic>

// On a function: compile it for AVX-512 (F, DQ, BW, VL) with 512-bit vectors.
#define DTRAIN_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,prefer-vector-width=512")))

namespace dtrain::kernels::cpu {

namespace internal {
inline std::atomic<bool>& Avx512DisabledForTest() {
  static std::atomic<bool> disabled{false};
  return disabled;
}
}  // namespace internal

// Whether this CPU (and OS, which libgcc checks through XCR0) runs the AVX-512 variants.
inline bool CpuHasAvx512() {
  static const bool has = (__builtin_cpu_init(), true) && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return has;
}

// The one decision every dispatching kernel asks.
inline bool UseAvx512() {
  return CpuHasAvx512() && !internal::Avx512DisabledForTest().load(std::memory_order_relaxed);
}

// test_only: makes UseAvx512() false (true: the AVX2 path everywhere) so tests can check both
// paths on a machine with AVX-512. Not for production code.
inline void TestOnlyDisableAvx512(bool disable) {
  internal::Avx512DisabledForTest().store(disable, std::memory_order_relaxed);
}

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_AVX512_H_
