// The GPT-2 stage as a specification: gradients against finite differences, the split backward
// against the fused one, and pipeline / tensor-parallel splits against the whole model.
#include "worker/model/gpt_stage.h"

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "worker/model/init.h"

namespace dtrain::model {
namespace {

using ::testing::HasSubstr;

constexpr GptConfig kTiny{/*vocab_size=*/32, /*context=*/8, /*n_layer=*/2, /*n_head=*/2,
                          /*n_embd=*/8};
constexpr int kB = 2, kT = 6;

std::unique_ptr<kernels::Backend> Cpu() {
  auto backend = kernels::CreateBackend("cpu", 1);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return std::move(backend).value();
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

Batch MakeBatch(int vocab) {
  Batch b;
  for (int i = 0; i < kB * kT; ++i) {
    b.tokens.push_back((7 * i + 3) % vocab);
    b.targets.push_back((5 * i + 1) % vocab);
  }
  return b;
}

std::unique_ptr<GptStage> WholeModel(kernels::Backend* be, uint64_t seed = 7) {
  auto stage = GptStage::Create(be, kTiny, {0, kTiny.n_layer, true, true}, {});
  EXPECT_TRUE(stage.ok()) << stage.status();
  EXPECT_TRUE(InitializeGpt2(**stage, seed).ok());
  return std::move(stage).value();
}

std::vector<float> Host(kernels::Backend* be, const float* p, int64_t n) {
  std::vector<float> h(n);
  EXPECT_TRUE(be->CopyToHost(h.data(), p, n * sizeof(float)).ok());
  return h;
}

// Mean loss of one forward pass.
double Loss(GptStage& s, StageActivations& a, const Batch& b) {
  EXPECT_TRUE(s.Forward(a, {b.tokens, b.targets, nullptr}).ok());
  return a.MeanLoss().value();
}

TEST(GptStage, GradientsMatchFiniteDifferences) {
  auto be = Cpu();
  auto s = WholeModel(be.get());
  auto a = s->NewActivations(kB, kT).value();
  const Batch b = MakeBatch(kTiny.vocab_size);
  ASSERT_TRUE(s->ZeroGrads().ok());
  ASSERT_TRUE(s->Forward(*a, {b.tokens, b.targets, nullptr}).ok());
  ASSERT_TRUE(s->Backward(*a, nullptr, 1.0f / (kB * kT)).ok());
  const int64_t n = s->layout().total_size();
  std::vector<float> grads = Host(be.get(), s->grads(), n);
  std::vector<float> params = Host(be.get(), s->params(), n);
  // A few elements of every tensor: central differences of the float loss. eps = 1e-3 keeps
  // float rounding of the loss (~5e-7) / 2eps near 3e-4, and LayerNorm (input ~0.02 at init)
  // near-linear.
  const float eps = 1e-3f;
  for (const ParameterTensor& t : s->layout().tensors()) {
    for (int64_t j : {int64_t{0}, t.local_size() / 2, t.local_size() - 1}) {
      const int64_t i = t.offset + j;
      const float saved = params[i];
      params[i] = saved + eps;
      ASSERT_TRUE(be->CopyToDevice(s->params(), params.data(), n * sizeof(float)).ok());
      const double up = Loss(*s, *a, b);
      params[i] = saved - eps;
      ASSERT_TRUE(be->CopyToDevice(s->params(), params.data(), n * sizeof(float)).ok());
      const double down = Loss(*s, *a, b);
      params[i] = saved;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(grads[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << t.name << "[" << j << "]";
    }
  }
}

TEST(GptStage, SplitBackwardEqualsFusedBackwardBitForBit) {
  auto be = Cpu();
  const Batch b = MakeBatch(kTiny.vocab_size);
  auto fused = WholeModel(be.get());
  auto split = WholeModel(be.get());
  auto fa = fused->NewActivations(kB, kT).value();
  auto sa = split->NewActivations(kB, kT).value();
  ASSERT_TRUE(fused->Forward(*fa, {b.tokens, b.targets, nullptr}).ok());
  ASSERT_TRUE(fused->Backward(*fa, nullptr, 0.5f).ok());
  ASSERT_TRUE(split->Forward(*sa, {b.tokens, b.targets, nullptr}).ok());
  ASSERT_TRUE(split->BackwardInput(*sa, nullptr, 0.5f).ok());
  // Between B and W only the input gradient exists: weight gradients are still zero.
  const int64_t n = split->layout().total_size();
  const ParameterTensor* fc = split->layout().Find("h.0.mlp.c_fc.weight");
  std::vector<float> mid = Host(be.get(), split->grads(), n);
  for (int64_t i = 0; i < fc->local_size(); ++i) ASSERT_EQ(mid[fc->offset + i], 0.0f);
  ASSERT_TRUE(split->BackwardWeight(*sa).ok());
  EXPECT_EQ(Host(be.get(), fused->grads(), n), Host(be.get(), split->grads(), n));
}

// Gradients kept in the caller's memory (the dp group's shared buffers) are the same gradients,
// written there; the storage must have the layout's size.
TEST(GptStage, GradientsInTheCallersStorageAreTheSame) {
  auto be = Cpu();
  const Batch b = MakeBatch(kTiny.vocab_size);
  auto own = WholeModel(be.get());
  auto borrowed = WholeModel(be.get());
  const int64_t n = own->layout().total_size();
  std::vector<float> storage(n + 1, 7.0f);
  EXPECT_EQ(borrowed->UseGradientStorage(absl::MakeSpan(storage)).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(borrowed->UseGradientStorage(absl::MakeSpan(storage).subspan(0, n)).ok());
  EXPECT_EQ(borrowed->grads(), storage.data());
  EXPECT_EQ(storage[0], 0.0f);  // zeroed
  for (GptStage* s : {own.get(), borrowed.get()}) {
    auto a = s->NewActivations(kB, kT).value();
    ASSERT_TRUE(s->Forward(*a, {b.tokens, b.targets, nullptr}).ok());
    ASSERT_TRUE(s->Backward(*a, nullptr, 0.5f).ok());
  }
  EXPECT_EQ(Host(be.get(), own->grads(), n),
            std::vector<float>(storage.begin(), storage.begin() + n));
  EXPECT_EQ(storage[n], 7.0f);  // nothing written past it
}

TEST(GptStage, OrderOfCallsIsEnforced) {
  auto be = Cpu();
  auto s = WholeModel(be.get());
  auto a = s->NewActivations(kB, kT).value();
  EXPECT_EQ(s->BackwardInput(*a, nullptr, 1.0f).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->BackwardWeight(*a).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->MeanLoss().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GptStage, TokenOutsideVocabularyIsRejected) {
  auto be = Cpu();
  auto s = WholeModel(be.get());
  auto a = s->NewActivations(kB, kT).value();
  Batch b = MakeBatch(kTiny.vocab_size);
  b.tokens[5] = kTiny.vocab_size;
  absl::Status st = s->Forward(*a, {b.tokens, b.targets, nullptr});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("tokens[5]=32 is outside the vocabulary [0, 32)"));
}

TEST(GptStage, SequenceLongerThanContextIsRejected) {
  auto be = Cpu();
  auto s = WholeModel(be.get());
  auto a = s->NewActivations(1, kTiny.context + 1);
  EXPECT_THAT(a.status().message(), HasSubstr("T=9"));
}

// Two pipeline stages, activations handed over by hand, reproduce the whole model exactly: the
// same ops in the same order, and the tied embedding's two gradient halves sum to the same value.
TEST(GptStage, TwoPipelineStagesEqualTheWholeModel) {
  auto be = Cpu();
  const Batch b = MakeBatch(kTiny.vocab_size);
  auto whole = WholeModel(be.get());
  auto first = GptStage::Create(be.get(), kTiny, {0, 1, true, false}, {}).value();
  auto last = GptStage::Create(be.get(), kTiny, {1, 1, false, true}, {}).value();
  ASSERT_TRUE(InitializeGpt2(*first, 7).ok());
  ASSERT_TRUE(InitializeGpt2(*last, 7).ok());
  auto wa = whole->NewActivations(kB, kT).value();
  auto fa = first->NewActivations(kB, kT).value();
  auto la = last->NewActivations(kB, kT).value();
  ASSERT_TRUE(whole->Forward(*wa, {b.tokens, b.targets, nullptr}).ok());
  ASSERT_TRUE(whole->Backward(*wa, nullptr, 1.0f / (kB * kT)).ok());
  ASSERT_TRUE(first->Forward(*fa, {b.tokens, {}, nullptr}).ok());
  ASSERT_TRUE(last->Forward(*la, {{}, b.targets, fa->output()}).ok());
  EXPECT_EQ(la->MeanLoss().value(), wa->MeanLoss().value());
  ASSERT_TRUE(last->Backward(*la, nullptr, 1.0f / (kB * kT)).ok());
  ASSERT_TRUE(first->Backward(*fa, la->input_grad(), 0.0f).ok());

  std::vector<float> wg = Host(be.get(), whole->grads(), whole->layout().total_size());
  std::vector<float> fg = Host(be.get(), first->grads(), first->layout().total_size());
  std::vector<float> lg = Host(be.get(), last->grads(), last->layout().total_size());
  for (const ParameterTensor& t : whole->layout().tensors()) {
    const ParameterTensor* ft = first->layout().Find(t.name);
    const ParameterTensor* lt = last->layout().Find(t.name);
    for (int64_t i = 0; i < t.local_size(); ++i) {
      float expect = 0.0f;
      if (ft != nullptr && lt != nullptr) {
        expect = lg[lt->offset + i] + fg[ft->offset + i];  // tied wte: head + embedding
      } else {
        expect = ft != nullptr ? fg[ft->offset + i] : lg[lt->offset + i];
      }
      ASSERT_EQ(wg[t.offset + i], expect) << t.name << "[" << i << "]";
    }
  }
}

// A reusable in-memory all-reduce for `n` threads: the tensor-parallel hook of a real worker is
// a ring over gRPC; this one sums host buffers (the CPU backend's device memory is host memory).
class ThreadAllReduce {
 public:
  explicit ThreadAllReduce(int n) : n_(n), slots_(n) {}
  absl::Status Sum(int rank, float* data, int64_t count) {
    absl::MutexLock lock(&mu_);
    const int gen = generation_;
    slots_[rank] = data;
    if (++arrived_ == n_) {
      std::vector<float> sum(count, 0.0f);
      for (float* s : slots_) {
        for (int64_t i = 0; i < count; ++i) sum[i] += s[i];
      }
      for (float* s : slots_) std::copy(sum.begin(), sum.end(), s);
      arrived_ = 0;
      ++generation_;
      done_.SignalAll();
    } else {
      while (generation_ == gen) done_.Wait(&mu_);
    }
    return absl::OkStatus();
  }

 private:
  const int n_;
  absl::Mutex mu_;
  absl::CondVar done_;
  std::vector<float*> slots_;
  int arrived_ = 0;
  int generation_ = 0;
};

// Megatron tensor parallelism over two ranks reproduces the whole model's loss and gradients
// (up to float summation order in the all-reduced partial matmuls).
TEST(GptStage, TwoTensorParallelRanksEqualTheWholeModel) {
  const Batch b = MakeBatch(kTiny.vocab_size);
  auto be0 = Cpu();
  auto whole = WholeModel(be0.get());
  auto wa = whole->NewActivations(kB, kT).value();
  ASSERT_TRUE(whole->Forward(*wa, {b.tokens, b.targets, nullptr}).ok());
  ASSERT_TRUE(whole->Backward(*wa, nullptr, 1.0f / (kB * kT)).ok());
  std::vector<float> wg = Host(be0.get(), whole->grads(), whole->layout().total_size());

  ThreadAllReduce reduce(2);
  std::unique_ptr<kernels::Backend> backends[2] = {Cpu(), Cpu()};
  std::unique_ptr<GptStage> ranks[2];
  double losses[2] = {0, 0};
  std::vector<float> grads[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      auto s =
          GptStage::Create(backends[r].get(), kTiny, {0, kTiny.n_layer, true, true}, {r, 2},
                           [&reduce, r](float* data, int64_t n) { return reduce.Sum(r, data, n); });
      ASSERT_TRUE(s.ok()) << s.status();
      ranks[r] = std::move(s).value();
      ASSERT_TRUE(InitializeGpt2(*ranks[r], 7).ok());
      auto a = ranks[r]->NewActivations(kB, kT).value();
      ASSERT_TRUE(ranks[r]->Forward(*a, {b.tokens, b.targets, nullptr}).ok());
      losses[r] = a->MeanLoss().value();
      ASSERT_TRUE(ranks[r]->Backward(*a, nullptr, 1.0f / (kB * kT)).ok());
      grads[r] = Host(backends[r].get(), ranks[r]->grads(), ranks[r]->layout().total_size());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_NE(ranks[0], nullptr);
  ASSERT_NE(ranks[1], nullptr);
  const double whole_loss = wa->MeanLoss().value();
  EXPECT_NEAR(losses[0], whole_loss, 1e-6 * whole_loss);
  EXPECT_EQ(losses[0], losses[1]);
  // Each rank's gradient shard must equal the same shard of the whole model's gradient.
  for (int r = 0; r < 2; ++r) {
    for (const ParameterTensor& t : ranks[r]->layout().tensors()) {
      const ParameterTensor* w = whole->layout().Find(t.name);
      std::vector<float> shard(t.local_size());
      ASSERT_TRUE(ExtractShard(t, {r, 2},
                               absl::MakeConstSpan(wg.data() + w->offset, w->local_size()),
                               absl::MakeSpan(shard))
                      .ok());
      for (int64_t i = 0; i < t.local_size(); ++i) {
        ASSERT_NEAR(grads[r][t.offset + i], shard[i], 1e-6 + 1e-4 * std::fabs(shard[i]))
            << "rank " << r << " " << t.name << "[" << i << "]";
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::model
