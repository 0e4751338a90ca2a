// How the CPU backend should use two thread pools: OpenMP (its loops) and OpenBLAS's pthreads.
// Each pair runs the same work two ways at the reference shapes (B=8, T=128, C=256, NH=4):
//
//   *_OpenMp:      OpenBLAS single-threaded, the work split over OpenMP threads (what the ops do)
//   *_BlasThreads: one sgemm call at a time, OpenBLAS threading it with openblas_set_num_threads
//
// BM_AttentionGemms_*: the 2 * B*NH small (T,T,hs) products of the attention forward.
// BM_FcMatmul_*: the MLP's (N,C) @ (C,4C), one large sgemm.
// BM_GeluThenFcMatmul_*: an OpenMP element-wise op followed by that sgemm, as in a training
// step: with OpenBLAS threads, the two pools hand the cores back and forth.
#include <cblas.h>

#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"

namespace dtrain::kernels::cpu {
namespace {

constexpr int kB = 8, kT = 128, kC = 256, kNH = 4, kHs = kC / kNH;
constexpr int kN = kB * kT;

// Sets OpenBLAS to `threads` for the lifetime of the object, then back to one thread.
class BlasThreads {
 public:
  explicit BlasThreads(int threads) { openblas_set_num_threads(threads); }
  ~BlasThreads() { openblas_set_num_threads(1); }
};

struct AttentionData {
  std::vector<float> qkv = std::vector<float>(int64_t{kN} * 3 * kC, 0.01f);
  std::vector<float> att = std::vector<float>(int64_t{kB} * kNH * kT * kT);
  std::vector<float> out = std::vector<float>(int64_t{kN} * kC);

  // scores = q @ k^T, then out = scores @ v, for one (b,h).
  void Head(int b, int h) {
    const float* q = qkv.data() + int64_t{b} * kT * 3 * kC + h * kHs;
    float* a = att.data() + (int64_t{b} * kNH + h) * kT * kT;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kT, kT, kHs, 0.125f, q, 3 * kC, q + kC,
                3 * kC, 0.0f, a, kT);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kT, kHs, kT, 1.0f, a, kT, q + 2 * kC,
                3 * kC, 0.0f, out.data() + int64_t{b} * kT * kC + h * kHs, kC);
  }
};

void BM_AttentionGemms_OpenMp(benchmark::State& state) {
  const int threads = state.range(0);
  UseSingleThreadedBlas();
  AttentionData d;
  for (auto _ : state) {
#pragma omp parallel for collapse(2) num_threads(threads) schedule(static)
    for (int b = 0; b < kB; ++b) {
      for (int h = 0; h < kNH; ++h) d.Head(b, h);
    }
  }
}

void BM_AttentionGemms_BlasThreads(benchmark::State& state) {
  BlasThreads blas(state.range(0));
  AttentionData d;
  for (auto _ : state) {
    for (int b = 0; b < kB; ++b) {
      for (int h = 0; h < kNH; ++h) d.Head(b, h);
    }
  }
}

struct FcData {
  std::vector<float> inp = std::vector<float>(int64_t{kN} * kC, 0.01f);
  std::vector<float> weight = std::vector<float>(int64_t{kC} * 4 * kC, 0.01f);
  std::vector<float> out = std::vector<float>(int64_t{kN} * 4 * kC);
  std::vector<float> gelu = std::vector<float>(int64_t{kN} * 4 * kC);
};

void BM_FcMatmul_OpenMp(benchmark::State& state) {
  FcData d;
  for (auto _ : state) {
    ParallelSgemm(false, false, kN, 4 * kC, kC, 1.0f, d.inp.data(), kC, d.weight.data(), 4 * kC,
                  0.0f, d.out.data(), 4 * kC, state.range(0));
  }
}

void BM_FcMatmul_BlasThreads(benchmark::State& state) {
  BlasThreads blas(state.range(0));
  FcData d;
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, 4 * kC, kC, 1.0f, d.inp.data(), kC,
                d.weight.data(), 4 * kC, 0.0f, d.out.data(), 4 * kC);
  }
}

void BM_GeluThenFcMatmul_OpenMp(benchmark::State& state) {
  const int threads = state.range(0);
  FcData d;
  for (auto _ : state) {
    (void)GeluForward(d.gelu.data(), d.out.data(), d.out.size(), threads);
    ParallelSgemm(false, false, kN, 4 * kC, kC, 1.0f, d.inp.data(), kC, d.weight.data(), 4 * kC,
                  0.0f, d.out.data(), 4 * kC, threads);
  }
}

void BM_GeluThenFcMatmul_BlasThreads(benchmark::State& state) {
  const int threads = state.range(0);
  BlasThreads blas(threads);
  FcData d;
  for (auto _ : state) {
    (void)GeluForward(d.gelu.data(), d.out.data(), d.out.size(), threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, 4 * kC, kC, 1.0f, d.inp.data(), kC,
                d.weight.data(), 4 * kC, 0.0f, d.out.data(), 4 * kC);
  }
}

#define THREADS(bm) BENCHMARK(bm)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()
THREADS(BM_AttentionGemms_OpenMp);
THREADS(BM_AttentionGemms_BlasThreads);
THREADS(BM_FcMatmul_OpenMp);
THREADS(BM_FcMatmul_BlasThreads);
THREADS(BM_GeluThenFcMatmul_OpenMp);
THREADS(BM_GeluThenFcMatmul_BlasThreads);

}  // namespace
}  // namespace dtrain::kernels::cpu
