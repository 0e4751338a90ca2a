// One full GPT-2 training step through the Backend interface, at the reference shapes (vocab 256,
// T = 128, C = 256, 4 layers, 4 heads, batch 8): zero the gradients, forward, cross-entropy,
// backward, global gradient norm, AdamW. It is the number the PyTorch comparison is about; the
// layer order follows llm.c's train_gpt2.c (tied wte / lm head, pre-LayerNorm blocks).
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/device_buffer.h"

namespace dtrain::kernels {
namespace {

constexpr int B = 8, T = 128, C = 256, NH = 4, V = 256, L = 4;
constexpr int N = B * T;

// Offsets of every parameter tensor inside one flat buffer (so AdamW is one call).
struct Layout {
  int64_t wte, wpe, lnfw, lnfb, total;
  struct Layer {
    int64_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  } layer[L];

  Layout() {
    int64_t at = 0;
    auto take = [&](int64_t n) { return (at += n) - n; };
    wte = take(int64_t{V} * C);
    wpe = take(int64_t{T} * C);
    for (Layer& l : layer) {
      l.ln1w = take(C);
      l.ln1b = take(C);
      l.qkvw = take(C * 3 * C);
      l.qkvb = take(3 * C);
      l.attprojw = take(C * C);
      l.attprojb = take(C);
      l.ln2w = take(C);
      l.ln2b = take(C);
      l.fcw = take(C * 4 * C);
      l.fcb = take(4 * C);
      l.fcprojw = take(4 * C * C);
      l.fcprojb = take(C);
    }
    lnfw = take(C);
    lnfb = take(C);
    total = at;
  }
};

// Activations of one layer, kept for the backward pass.
struct LayerActs {
  DeviceBuffer<float> ln1, ln1_mean, ln1_rstd, qkv, atty, att, attproj, residual2, ln2, ln2_mean,
      ln2_rstd, fch, fch_gelu, fcproj, residual3;
};

#define OK(expr)                                                                 \
  do {                                                                           \
    absl::Status s_ = (expr);                                                    \
    if (!s_.ok()) return state.SkipWithError(std::string(s_.message()).c_str()); \
  } while (0)

template <typename T_>
DeviceBuffer<T_> Buffer(Backend* be, int64_t n) {
  return std::move(DeviceBuffer<T_>::Create(be, n)).value();
}

void BM_Gpt2TrainingStep(benchmark::State& state) {
  std::unique_ptr<Backend> be = std::move(CreateCpuBackend(state.range(0))).value();
  const Layout lay;
  auto params = Buffer<float>(be.get(), lay.total), grads = Buffer<float>(be.get(), lay.total);
  auto m = Buffer<float>(be.get(), lay.total), v = Buffer<float>(be.get(), lay.total);
  {
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    std::vector<float> host(lay.total);
    for (float& x : host) x = dist(rng);
    for (int l = 0; l < L; ++l) {  // LayerNorm weights 1
      for (int c = 0; c < C; ++c) host[lay.layer[l].ln1w + c] = host[lay.layer[l].ln2w + c] = 1;
    }
    for (int c = 0; c < C; ++c) host[lay.lnfw + c] = 1;
    OK(params.CopyFrom(host));
  }
  auto tokens = Buffer<int32_t>(be.get(), N), targets = Buffer<int32_t>(be.get(), N);
  {
    std::mt19937 rng(8);
    std::vector<int32_t> t(N), u(N);
    for (int i = 0; i < N; ++i) {
      t[i] = rng() % V;
      u[i] = rng() % V;
    }
    OK(tokens.CopyFrom(t));
    OK(targets.CopyFrom(u));
  }
  auto encoded = Buffer<float>(be.get(), N * C);
  std::vector<LayerActs> acts(L);
  for (LayerActs& a : acts) {
    for (auto* buf : {&a.ln1, &a.atty, &a.attproj, &a.residual2, &a.ln2, &a.fcproj, &a.residual3}) {
      *buf = Buffer<float>(be.get(), N * C);
    }
    for (auto* buf : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) {
      *buf = Buffer<float>(be.get(), N);
    }
    a.qkv = Buffer<float>(be.get(), N * 3 * C);
    a.att = Buffer<float>(be.get(), int64_t{B} * NH * T * T);
    a.fch = Buffer<float>(be.get(), N * 4 * C);
    a.fch_gelu = Buffer<float>(be.get(), N * 4 * C);
  }
  auto lnf = Buffer<float>(be.get(), N * C), lnf_mean = Buffer<float>(be.get(), N);
  auto lnf_rstd = Buffer<float>(be.get(), N), logits = Buffer<float>(be.get(), N * V);
  auto probs = Buffer<float>(be.get(), N * V), losses = Buffer<float>(be.get(), N);
  // Gradient scratch, reused by every layer.
  auto dlogits = Buffer<float>(be.get(), N * V), dresidual = Buffer<float>(be.get(), N * C);
  auto dln = Buffer<float>(be.get(), N * C), datty = Buffer<float>(be.get(), N * C);
  auto dqkv = Buffer<float>(be.get(), N * 3 * C), dfch = Buffer<float>(be.get(), N * 4 * C);
  auto dfch_gelu = Buffer<float>(be.get(), N * 4 * C);
  auto scratch = Buffer<float>(be.get(), int64_t{B} * NH * T * T);

  float* P = params.data();
  float* G = grads.data();
  AdamWParams adamw;
  adamw.lr = 1e-4f;
  adamw.weight_decay = 0.1f;
  for (auto _ : state) {
    OK(grads.SetZero());
    // ---- forward ----
    OK(be->EmbeddingForward(encoded.data(), tokens.data(), P + lay.wte, P + lay.wpe, B, T, C));
    for (int l = 0; l < L; ++l) {
      const auto& w = lay.layer[l];
      LayerActs& a = acts[l];
      const float* residual = l == 0 ? encoded.data() : acts[l - 1].residual3.data();
      OK(be->LayerNormForward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), residual,
                              P + w.ln1w, P + w.ln1b, N, C));
      OK(be->MatmulForward(a.qkv.data(), a.ln1.data(), P + w.qkvw, P + w.qkvb, N, C, 3 * C));
      OK(be->AttentionForward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH));
      OK(be->MatmulForward(a.attproj.data(), a.atty.data(), P + w.attprojw, P + w.attprojb, N, C,
                           C));
      OK(be->ResidualForward(a.residual2.data(), residual, a.attproj.data(), int64_t{N} * C));
      OK(be->LayerNormForward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(),
                              a.residual2.data(), P + w.ln2w, P + w.ln2b, N, C));
      OK(be->MatmulForward(a.fch.data(), a.ln2.data(), P + w.fcw, P + w.fcb, N, C, 4 * C));
      OK(be->GeluForward(a.fch_gelu.data(), a.fch.data(), int64_t{N} * 4 * C));
      OK(be->MatmulForward(a.fcproj.data(), a.fch_gelu.data(), P + w.fcprojw, P + w.fcprojb, N,
                           4 * C, C));
      OK(be->ResidualForward(a.residual3.data(), a.residual2.data(), a.fcproj.data(),
                             int64_t{N} * C));
    }
    const float* last = acts[L - 1].residual3.data();
    OK(be->LayerNormForward(lnf.data(), lnf_mean.data(), lnf_rstd.data(), last, P + lay.lnfw,
                            P + lay.lnfb, N, C));
    // logits (N,V) = lnf (N,C) @ wte^T
    OK(be->Gemm(false, true, N, V, C, 1.0f, lnf.data(), C, P + lay.wte, C, 0.0f, logits.data(), V));
    OK(be->CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), N, V));

    // ---- backward ----
    OK(be->CrossEntropyBackward(dlogits.data(), probs.data(), targets.data(), 1.0f / N, N, V));
    OK(be->Gemm(false, false, N, C, V, 1.0f, dlogits.data(), V, P + lay.wte, C, 0.0f, dln.data(),
                C));
    OK(be->Gemm(true, false, V, C, N, 1.0f, dlogits.data(), V, lnf.data(), C, 1.0f, G + lay.wte,
                C));
    OK(dresidual.SetZero());
    OK(be->LayerNormBackward(dresidual.data(), G + lay.lnfw, G + lay.lnfb, dln.data(), last,
                             P + lay.lnfw, lnf_mean.data(), lnf_rstd.data(), N, C));
    // dresidual is the gradient of the residual stream; each block's branches add into it.
    for (int l = L - 1; l >= 0; --l) {
      const auto& w = lay.layer[l];
      LayerActs& a = acts[l];
      const float* residual = l == 0 ? encoded.data() : acts[l - 1].residual3.data();
      OK(be->MatmulBackwardInput(dfch_gelu.data(), dresidual.data(), P + w.fcprojw, N, 4 * C, C,
                                 false));
      OK(be->MatmulBackwardWeight(G + w.fcprojw, G + w.fcprojb, dresidual.data(), a.fch_gelu.data(),
                                  N, 4 * C, C));
      OK(be->GeluBackward(dfch.data(), a.fch.data(), dfch_gelu.data(), int64_t{N} * 4 * C));
      OK(be->MatmulBackwardInput(dln.data(), dfch.data(), P + w.fcw, N, C, 4 * C, false));
      OK(be->MatmulBackwardWeight(G + w.fcw, G + w.fcb, dfch.data(), a.ln2.data(), N, C, 4 * C));
      OK(be->LayerNormBackward(dresidual.data(), G + w.ln2w, G + w.ln2b, dln.data(),
                               a.residual2.data(), P + w.ln2w, a.ln2_mean.data(), a.ln2_rstd.data(),
                               N, C));
      OK(be->MatmulBackwardInput(datty.data(), dresidual.data(), P + w.attprojw, N, C, C, false));
      OK(be->MatmulBackwardWeight(G + w.attprojw, G + w.attprojb, dresidual.data(), a.atty.data(),
                                  N, C, C));
      OK(be->AttentionBackward(dqkv.data(), scratch.data(), datty.data(), a.qkv.data(),
                               a.att.data(), B, T, C, NH));
      OK(be->MatmulBackwardInput(dln.data(), dqkv.data(), P + w.qkvw, N, C, 3 * C, false));
      OK(be->MatmulBackwardWeight(G + w.qkvw, G + w.qkvb, dqkv.data(), a.ln1.data(), N, C, 3 * C));
      OK(be->LayerNormBackward(dresidual.data(), G + w.ln1w, G + w.ln1b, dln.data(), residual,
                               P + w.ln1w, a.ln1_mean.data(), a.ln1_rstd.data(), N, C));
    }
    OK(be->EmbeddingBackward(G + lay.wte, G + lay.wpe, dresidual.data(), tokens.data(), B, T, C));

    // ---- optimizer: clip to global norm 1, AdamW ----
    absl::StatusOr<double> sq = be->SquaredNorm(G, lay.total);
    OK(sq.status());
    const double norm = std::sqrt(*sq);
    adamw.grad_scale = norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f;
    OK(be->AdamWUpdate(P, G, m.data(), v.data(), lay.total, adamw));
    ++adamw.step;
    OK(be->Synchronize());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(double{N} * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gpt2TrainingStep)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dtrain::kernels
