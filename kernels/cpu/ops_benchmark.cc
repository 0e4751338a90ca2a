// Speed of the CPU ops at the reference training shapes: GPT-2 with vocab 256, T = 128, C = 256,
// 4 heads, batch 8 (N = B*T = 1024 rows). The argument of every benchmark is the thread count.
//
//   bazel run -c opt //kernels/cpu:ops_benchmark -- --benchmark_filter=Attention
//
// Times are wall-clock (UseRealTime): the ops are multi-threaded.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/residual.h"

namespace dtrain::kernels::cpu {
namespace {

constexpr int kB = 8, kT = 128, kC = 256, kNH = 4, kV = 256;
constexpr int kN = kB * kT;

std::vector<float> Random(int64_t n, float scale = 1.0f) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> Tokens(int64_t n) {
  std::mt19937 rng(99);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = static_cast<int32_t>(rng() % kV);
  return v;
}

void Check(const absl::Status& status, benchmark::State& state) {
  if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
}

// 2 * multiply-adds per iteration, reported as FLOP/s.
void CountFlops(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOPS"] =
      benchmark::Counter(flops_per_iteration * state.iterations(), benchmark::Counter::kIsRate);
}

// ---- Matmul: (N,C) @ (C,OC), the four GPT-2 shapes ------------------------------------------
void BM_MatmulForward(benchmark::State& state) {
  const int threads = state.range(0), C = state.range(1), OC = state.range(2);
  auto inp = Random(int64_t{kN} * C), w = Random(int64_t{C} * OC), bias = Random(OC);
  std::vector<float> out(int64_t{kN} * OC);
  for (auto _ : state) {
    Check(MatmulForward(out.data(), inp.data(), w.data(), bias.data(), kN, C, OC, threads), state);
  }
  CountFlops(state, 2.0 * kN * C * OC);
}

void BM_MatmulBackward(benchmark::State& state) {  // input and weight gradients
  const int threads = state.range(0), C = state.range(1), OC = state.range(2);
  auto inp = Random(int64_t{kN} * C), w = Random(int64_t{C} * OC), dout = Random(kN * OC);
  std::vector<float> dinp(int64_t{kN} * C), dw(int64_t{C} * OC), db(OC);
  for (auto _ : state) {
    Check(MatmulBackwardInput(dinp.data(), dout.data(), w.data(), kN, C, OC, false, threads),
          state);
    Check(MatmulBackwardWeight(dw.data(), db.data(), dout.data(), inp.data(), kN, C, OC, threads),
          state);
  }
  CountFlops(state, 4.0 * kN * C * OC);
}

void MatmulShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "C", "OC"});
  for (int threads : {1, 2}) {
    b->Args({threads, kC, 3 * kC});  // qkv
    b->Args({threads, kC, kC});      // attention projection
    b->Args({threads, kC, 4 * kC});  // fc
    b->Args({threads, 4 * kC, kC});  // fc projection
  }
  b->UseRealTime();
}
BENCHMARK(BM_MatmulForward)->Apply(MatmulShapes);
BENCHMARK(BM_MatmulBackward)->Apply(MatmulShapes);

// ---- The dense GEMMs of one training step, and nothing else ---------------------------------
// The floor under a step of dtrain's CPU backend and of PyTorch alike, which call the same
// OpenBLAS for the same products: per layer, the forward, input-gradient and weight-gradient
// GEMMs of qkv, attention projection, fc and fc projection (transposes and betas as matmul.cc
// calls them), 4 layers, then the tied head's logits, dlnf and dwte (gpt_stage.cc). Not in it:
// attention's causal blocks (about 1% of the FLOPs) and everything that is not a GEMM. The
// operands stay warm in cache between calls, so this is, if anything, optimistic.
struct GemmCall {
  bool trans_a, trans_b;
  int m, n, k;
  float beta;
};

std::vector<GemmCall> StepDenseGemms() {
  std::vector<GemmCall> layer;
  for (const auto& [C, OC] : {std::pair{kC, 3 * kC}, {kC, kC}, {kC, 4 * kC}, {4 * kC, kC}}) {
    layer.push_back({false, false, kN, OC, C, 1.0f});  // out (N,OC) = inp @ w + bias
    layer.push_back({false, true, kN, C, OC, 0.0f});   // dinp (N,C) = dout @ w^T
    layer.push_back({true, false, C, OC, kN, 1.0f});   // dw (C,OC) += inp^T @ dout
  }
  std::vector<GemmCall> calls;
  for (int l = 0; l < 4; ++l) calls.insert(calls.end(), layer.begin(), layer.end());
  calls.push_back({false, true, kN, kV, kC, 0.0f});   // logits (N,V) = lnf @ wte^T
  calls.push_back({false, false, kN, kC, kV, 0.0f});  // dlnf (N,C) = dlogits @ wte
  calls.push_back({true, false, kV, kC, kN, 1.0f});   // dwte (V,C) += dlogits^T @ lnf
  return calls;
}

void BM_StepDenseGemms(benchmark::State& state) {
  const int threads = state.range(0);
  const std::vector<GemmCall> calls = StepDenseGemms();
  const int64_t most = int64_t{kN} * 4 * kC;  // the largest operand, (N,4C)
  auto a = Random(most), b = Random(most);
  std::vector<float> c(most);
  double flops = 0;
  for (const GemmCall& g : calls) flops += 2.0 * g.m * g.n * g.k;
  for (auto _ : state) {
    for (const GemmCall& g : calls) {
      ParallelSgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, a.data(), g.trans_a ? g.m : g.k,
                    b.data(), g.trans_b ? g.k : g.n, g.beta, c.data(), g.n, threads);
    }
  }
  CountFlops(state, flops);
}
BENCHMARK(BM_StepDenseGemms)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// ---- Attention ----------------------------------------------------------------------------
void BM_AttentionForward(benchmark::State& state) {
  const int threads = state.range(0);
  auto qkv = Random(int64_t{kN} * 3 * kC);
  std::vector<float> out(int64_t{kN} * kC), att(int64_t{kB} * kNH * kT * kT);
  for (auto _ : state) {
    Check(AttentionForward(out.data(), att.data(), qkv.data(), kB, kT, kC, kNH, threads), state);
  }
}

void BM_AttentionBackward(benchmark::State& state) {
  const int threads = state.range(0);
  auto qkv = Random(int64_t{kN} * 3 * kC), dout = Random(int64_t{kN} * kC);
  std::vector<float> out(int64_t{kN} * kC), att(int64_t{kB} * kNH * kT * kT);
  std::vector<float> dqkv(qkv.size()), scratch(att.size());
  Check(AttentionForward(out.data(), att.data(), qkv.data(), kB, kT, kC, kNH, threads), state);
  for (auto _ : state) {
    Check(AttentionBackward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), kB,
                            kT, kC, kNH, threads),
          state);
  }
}
BENCHMARK(BM_AttentionForward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_AttentionBackward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// ---- Row-wise and element-wise ops ----------------------------------------------------------
void BM_LayerNormForward(benchmark::State& state) {
  const int threads = state.range(0);
  auto inp = Random(int64_t{kN} * kC), w = Random(kC), b = Random(kC);
  std::vector<float> out(inp.size()), mean(kN), rstd(kN);
  for (auto _ : state) {
    Check(LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), kN,
                           kC, threads),
          state);
  }
}

void BM_LayerNormBackward(benchmark::State& state) {
  const int threads = state.range(0);
  auto inp = Random(int64_t{kN} * kC), w = Random(kC), b = Random(kC), dout = Random(kN * kC);
  std::vector<float> out(inp.size()), mean(kN), rstd(kN), dinp(inp.size()), dw(kC), db(kC);
  Check(LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), kN,
                         kC, threads),
        state);
  for (auto _ : state) {
    Check(LayerNormBackward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                            mean.data(), rstd.data(), kN, kC, threads),
          state);
  }
}

void BM_GeluForward(benchmark::State& state) {  // the MLP's (B,T,4C)
  const int threads = state.range(0);
  auto inp = Random(int64_t{kN} * 4 * kC);
  std::vector<float> out(inp.size());
  for (auto _ : state) Check(GeluForward(out.data(), inp.data(), inp.size(), threads), state);
}

void BM_GeluBackward(benchmark::State& state) {
  const int threads = state.range(0);
  auto inp = Random(int64_t{kN} * 4 * kC), dout = Random(inp.size());
  std::vector<float> dinp(inp.size());
  for (auto _ : state) {
    Check(GeluBackward(dinp.data(), inp.data(), dout.data(), inp.size(), threads), state);
  }
}

void BM_Residual(benchmark::State& state) {  // forward + backward, (B,T,C)
  const int threads = state.range(0);
  auto a = Random(int64_t{kN} * kC), b = Random(a.size()), dout = Random(a.size());
  std::vector<float> out(a.size()), da(a.size()), db(a.size());
  for (auto _ : state) {
    Check(ResidualForward(out.data(), a.data(), b.data(), a.size(), threads), state);
    Check(ResidualBackward(da.data(), db.data(), dout.data(), a.size(), threads), state);
  }
}

void BM_Embedding(benchmark::State& state) {  // forward + backward
  const int threads = state.range(0);
  auto wte = Random(int64_t{kV} * kC), wpe = Random(int64_t{kT} * kC), dout = Random(kN * kC);
  auto tokens = Tokens(kN);
  std::vector<float> out(int64_t{kN} * kC), dwte(wte.size()), dwpe(wpe.size());
  for (auto _ : state) {
    Check(EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), kB, kT, kC, threads),
          state);
    Check(EmbeddingBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), kB, kT, kC,
                            threads),
          state);
  }
}

void BM_CrossEntropy(benchmark::State& state) {  // forward + backward
  const int threads = state.range(0);
  auto logits = Random(int64_t{kN} * kV, 3.0f);
  auto targets = Tokens(kN);
  std::vector<float> losses(kN), probs(logits.size()), dlogits(logits.size());
  for (auto _ : state) {
    Check(CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), kN, kV,
                              threads),
          state);
    Check(CrossEntropyBackward(dlogits.data(), probs.data(), targets.data(), 1.0f / kN, kN, kV,
                               threads),
          state);
  }
}

// The optimizer over every parameter of the reference model (~3.2M): norm, then AdamW.
void BM_Optimizer(benchmark::State& state) {
  const int threads = state.range(0);
  const int64_t n = int64_t{kV} * kC + int64_t{kT} * kC + 4 * (12 * int64_t{kC} * kC + 13 * kC);
  auto params = Random(n), grads = Random(n, 0.01f);
  std::vector<float> m(n), v(n);
  AdamWParams p;
  p.lr = 1e-4f;
  p.weight_decay = 0.1f;
  for (auto _ : state) {
    auto norm = SquaredNorm(grads.data(), n, threads);
    Check(norm.status(), state);
    Check(AdamWUpdate(params.data(), grads.data(), m.data(), v.data(), n, p, threads), state);
    ++p.step;
  }
}

#define PER_THREAD_COUNT(bm) BENCHMARK(bm)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()
PER_THREAD_COUNT(BM_LayerNormForward);
PER_THREAD_COUNT(BM_LayerNormBackward);
PER_THREAD_COUNT(BM_GeluForward);
PER_THREAD_COUNT(BM_GeluBackward);
PER_THREAD_COUNT(BM_Residual);
PER_THREAD_COUNT(BM_Embedding);
PER_THREAD_COUNT(BM_CrossEntropy);
PER_THREAD_COUNT(BM_Optimizer);

}  // namespace
}  // namespace dtrain::kernels::cpu
