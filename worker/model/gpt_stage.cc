#include "worker/model/gpt_stage.h"

#include <numeric>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::model {

using kernels::Backend;
using kernels::DeviceBuffer;

struct GptStage::LayerWeights {
  int64_t ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
  int64_t ln2_w, ln2_b, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
};

GptStage::GptStage(Backend* backend, const GptConfig& config, const StageSpec& stage,
                   const TensorParallelSpec& tp, AllReduceSumFn all_reduce, ParameterLayout layout)
    : backend_(backend),
      config_(config),
      stage_(stage),
      tp_(tp),
      all_reduce_(std::move(all_reduce)),
      layout_(std::move(layout)) {}

GptStage::~GptStage() = default;

absl::StatusOr<std::unique_ptr<GptStage>> GptStage::Create(Backend* backend,
                                                           const GptConfig& config,
                                                           const StageSpec& stage,
                                                           const TensorParallelSpec& tp,
                                                           AllReduceSumFn tp_all_reduce) {
  ASSIGN_OR_RETURN(ParameterLayout layout, ParameterLayout::Create(config, stage, tp));
  if (tp.size > 1 && !tp_all_reduce) {
    return absl::InvalidArgumentError("tp size > 1 needs a tensor-parallel all-reduce");
  }
  std::unique_ptr<GptStage> s(
      new GptStage(backend, config, stage, tp, std::move(tp_all_reduce), std::move(layout)));
  ASSIGN_OR_RETURN(s->params_, DeviceBuffer<float>::Create(backend, s->layout_.total_size()));
  ASSIGN_OR_RETURN(s->grads_, DeviceBuffer<float>::Create(backend, s->layout_.total_size()));
  RETURN_IF_ERROR(s->ResolveOffsets());
  return s;
}

absl::Status GptStage::ResolveOffsets() {
  auto offset = [&](const std::string& name) -> absl::StatusOr<int64_t> {
    const ParameterTensor* t = layout_.Find(name);
    if (t == nullptr) return absl::InternalError(absl::StrCat("layout lacks ", name));
    return t->offset;
  };
  if (stage_.has_embedding) {
    ASSIGN_OR_RETURN(wpe_, offset("wpe.weight"));
  }
  if (stage_.has_embedding || stage_.has_head) {
    ASSIGN_OR_RETURN(wte_, offset("wte.weight"));
  }
  if (stage_.has_head) {
    ASSIGN_OR_RETURN(lnf_w_, offset("ln_f.weight"));
    ASSIGN_OR_RETURN(lnf_b_, offset("ln_f.bias"));
  }
  for (int i = 0; i < stage_.num_layers; ++i) {
    const std::string p = absl::StrCat("h.", stage_.first_layer + i, ".");
    LayerWeights w;
    ASSIGN_OR_RETURN(w.ln1_w, offset(p + "ln_1.weight"));
    ASSIGN_OR_RETURN(w.ln1_b, offset(p + "ln_1.bias"));
    ASSIGN_OR_RETURN(w.qkv_w, offset(p + "attn.c_attn.weight"));
    ASSIGN_OR_RETURN(w.qkv_b, offset(p + "attn.c_attn.bias"));
    ASSIGN_OR_RETURN(w.attn_proj_w, offset(p + "attn.c_proj.weight"));
    ASSIGN_OR_RETURN(w.attn_proj_b, offset(p + "attn.c_proj.bias"));
    ASSIGN_OR_RETURN(w.ln2_w, offset(p + "ln_2.weight"));
    ASSIGN_OR_RETURN(w.ln2_b, offset(p + "ln_2.bias"));
    ASSIGN_OR_RETURN(w.fc_w, offset(p + "mlp.c_fc.weight"));
    ASSIGN_OR_RETURN(w.fc_b, offset(p + "mlp.c_fc.bias"));
    ASSIGN_OR_RETURN(w.mlp_proj_w, offset(p + "mlp.c_proj.weight"));
    ASSIGN_OR_RETURN(w.mlp_proj_b, offset(p + "mlp.c_proj.bias"));
    layers_.push_back(w);
  }
  return absl::OkStatus();
}

absl::Status GptStage::ZeroGrads() { return grads_.SetZero(); }

absl::Status GptStage::UseGradientStorage(absl::Span<float> storage) {
  if (!backend_->DeviceMemoryIsHostMemory()) {
    return absl::FailedPreconditionError(
        "gradients in host memory need a backend whose device memory is host memory");
  }
  if (static_cast<int64_t>(storage.size()) != layout_.total_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient storage of ", storage.size(), " floats for ", layout_.total_size()));
  }
  grads_ = DeviceBuffer<float>::Borrow(backend_, storage.data(), storage.size());
  return grads_.SetZero();
}

absl::StatusOr<std::unique_ptr<StageActivations>> GptStage::NewActivations(int B, int T) {
  if (B <= 0 || T <= 0 || T > config_.context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch B=", B, " T=", T, ": need B > 0 and 0 < T <= context=", config_.context));
  }
  const int64_t N = int64_t{B} * T, C = config_.n_embd, Cl = C / tp_.size;
  const int64_t NHl = config_.n_head / tp_.size, V = config_.vocab_size;
  std::unique_ptr<StageActivations> a(new StageActivations());
  a->backend_ = backend_;
  a->B_ = B;
  a->T_ = T;
  auto alloc = [&](DeviceBuffer<float>& buf, int64_t n) -> absl::Status {
    ASSIGN_OR_RETURN(buf, DeviceBuffer<float>::Create(backend_, n));
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(a->tokens_, DeviceBuffer<int32_t>::Create(backend_, N));
  ASSIGN_OR_RETURN(a->targets_, DeviceBuffer<int32_t>::Create(backend_, N));
  RETURN_IF_ERROR(alloc(a->input_, N * C));
  a->layers_.resize(stage_.num_layers);
  for (StageActivations::Layer& l : a->layers_) {
    RETURN_IF_ERROR(alloc(l.ln1, N * C));
    RETURN_IF_ERROR(alloc(l.ln1_mean, N));
    RETURN_IF_ERROR(alloc(l.ln1_rstd, N));
    RETURN_IF_ERROR(alloc(l.qkv, N * 3 * Cl));
    RETURN_IF_ERROR(alloc(l.atty, N * Cl));
    RETURN_IF_ERROR(alloc(l.att, int64_t{B} * NHl * T * T));
    RETURN_IF_ERROR(alloc(l.res2, N * C));
    RETURN_IF_ERROR(alloc(l.ln2, N * C));
    RETURN_IF_ERROR(alloc(l.ln2_mean, N));
    RETURN_IF_ERROR(alloc(l.ln2_rstd, N));
    RETURN_IF_ERROR(alloc(l.fch, N * 4 * Cl));
    RETURN_IF_ERROR(alloc(l.fch_gelu, N * 4 * Cl));
    RETURN_IF_ERROR(alloc(l.out, N * C));
    RETURN_IF_ERROR(alloc(l.dres2, N * C));
    RETURN_IF_ERROR(alloc(l.dfch, N * 4 * Cl));
    RETURN_IF_ERROR(alloc(l.dqkv, N * 3 * Cl));
  }
  a->dres_.resize(stage_.num_layers + 1);
  for (DeviceBuffer<float>& d : a->dres_) RETURN_IF_ERROR(alloc(d, N * C));
  if (stage_.has_head) {
    RETURN_IF_ERROR(alloc(a->lnf, N * C));
    RETURN_IF_ERROR(alloc(a->lnf_mean, N));
    RETURN_IF_ERROR(alloc(a->lnf_rstd, N));
    RETURN_IF_ERROR(alloc(a->logits, N * V));
    RETURN_IF_ERROR(alloc(a->probs, N * V));
    RETURN_IF_ERROR(alloc(a->losses, N));
    RETURN_IF_ERROR(alloc(a->dlnf, N * C));
  }
  if (stage_.num_layers > 0) {
    RETURN_IF_ERROR(alloc(a->proj, N * C));
    RETURN_IF_ERROR(alloc(a->dwide, N * 4 * Cl));
    RETURN_IF_ERROR(alloc(a->datty, N * Cl));
    RETURN_IF_ERROR(alloc(a->dln, N * C));
    RETURN_IF_ERROR(alloc(a->datt, int64_t{B} * NHl * T * T));
  }
  return a;
}

const float* StageActivations::output() const {
  return layers_.empty() ? input_.data() : layers_.back().out.data();
}

absl::StatusOr<double> StageActivations::MeanLoss() const {
  if (losses.size() == 0) return absl::FailedPreconditionError("this stage computes no loss");
  if (!has_loss_) return absl::FailedPreconditionError("MeanLoss before Forward");
  ASSIGN_OR_RETURN(std::vector<float> host, losses.ToHost());
  double sum = 0.0;
  for (float x : host) sum += x;
  return sum / host.size();
}

absl::Status GptStage::TpAllReduce(float* data, int64_t n) {
  if (tp_.size == 1) return absl::OkStatus();
  return all_reduce_(data, n);
}

namespace {

absl::Status CheckIds(absl::Span<const int32_t> ids, int64_t n, int vocab, const char* what) {
  if (static_cast<int64_t>(ids.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": got ", ids.size(), " ids, expected B*T=", n));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "[", i, "]=", ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GptStage::StopRequested(const char* pass, int l) const {
  if (stop_ == nullptr || !stop_->load(std::memory_order_relaxed)) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat("stopped in the ", pass, " before layer ",
                                           stage_.first_layer + l, " of ", config_.n_layer));
}

absl::Status GptStage::Forward(StageActivations& acts, const StageInput& input) {
  const int B = acts.B_, T = acts.T_, C = config_.n_embd, V = config_.vocab_size;
  const int N = B * T;
  Backend* be = backend_;
  if (stage_.has_embedding) {
    RETURN_IF_ERROR(CheckIds(input.tokens, N, V, "tokens"));
    RETURN_IF_ERROR(acts.tokens_.CopyFrom(input.tokens));
    RETURN_IF_ERROR(
        be->EmbeddingForward(acts.input_.data(), acts.tokens_.data(), P(wte_), P(wpe_), B, T, C));
  } else {
    if (input.activation == nullptr) {
      return absl::InvalidArgumentError("a stage without the embedding needs an input activation");
    }
    RETURN_IF_ERROR(be->CopyOnDevice(acts.input_.data(), input.activation, acts.input_.bytes()));
  }
  for (int l = 0; l < stage_.num_layers; ++l) {
    RETURN_IF_ERROR(StopRequested("forward pass", l));
    const float* x = l == 0 ? acts.input_.data() : acts.layers_[l - 1].out.data();
    RETURN_IF_ERROR(BlockForward(l, acts, x));
  }
  if (stage_.has_head) {
    RETURN_IF_ERROR(CheckIds(input.targets, N, V, "targets"));
    RETURN_IF_ERROR(acts.targets_.CopyFrom(input.targets));
    RETURN_IF_ERROR(be->LayerNormForward(acts.lnf.data(), acts.lnf_mean.data(),
                                         acts.lnf_rstd.data(), acts.output(), P(lnf_w_), P(lnf_b_),
                                         N, C));
    // logits (N,V) = lnf (N,C) @ wte^T: the head is tied to the token embedding.
    RETURN_IF_ERROR(be->Gemm(false, true, N, V, C, 1.0f, acts.lnf.data(), C, P(wte_), C, 0.0f,
                             acts.logits.data(), V));
    RETURN_IF_ERROR(be->CrossEntropyForward(acts.losses.data(), acts.probs.data(),
                                            acts.logits.data(), acts.targets_.data(), N, V));
  }
  acts.forward_done_ = true;
  acts.has_loss_ = stage_.has_head;
  acts.backward_input_done_ = false;
  return absl::OkStatus();
}

absl::Status GptStage::BlockForward(int l, StageActivations& acts, const float* x) {
  const int B = acts.B_, T = acts.T_, N = B * T, C = config_.n_embd;
  const int Cl = C / tp_.size, NHl = config_.n_head / tp_.size;
  const LayerWeights& w = layers_[l];
  StageActivations::Layer& a = acts.layers_[l];
  Backend* be = backend_;
  // Row-parallel projections add their bias once, on tp rank 0, before the all-reduce.
  const bool add_row_bias = tp_.rank == 0;
  // x + attn(ln_1(x))
  RETURN_IF_ERROR(be->LayerNormForward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x,
                                       P(w.ln1_w), P(w.ln1_b), N, C));
  RETURN_IF_ERROR(
      be->MatmulForward(a.qkv.data(), a.ln1.data(), P(w.qkv_w), P(w.qkv_b), N, C, 3 * Cl));
  RETURN_IF_ERROR(be->AttentionForward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, Cl, NHl));
  RETURN_IF_ERROR(be->MatmulForward(acts.proj.data(), a.atty.data(), P(w.attn_proj_w),
                                    add_row_bias ? P(w.attn_proj_b) : nullptr, N, Cl, C));
  RETURN_IF_ERROR(TpAllReduce(acts.proj.data(), int64_t{N} * C));
  RETURN_IF_ERROR(be->ResidualForward(a.res2.data(), x, acts.proj.data(), int64_t{N} * C));
  // res2 + mlp(ln_2(res2))
  RETURN_IF_ERROR(be->LayerNormForward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(),
                                       a.res2.data(), P(w.ln2_w), P(w.ln2_b), N, C));
  RETURN_IF_ERROR(
      be->MatmulForward(a.fch.data(), a.ln2.data(), P(w.fc_w), P(w.fc_b), N, C, 4 * Cl));
  RETURN_IF_ERROR(be->GeluForward(a.fch_gelu.data(), a.fch.data(), int64_t{N} * 4 * Cl));
  RETURN_IF_ERROR(be->MatmulForward(acts.proj.data(), a.fch_gelu.data(), P(w.mlp_proj_w),
                                    add_row_bias ? P(w.mlp_proj_b) : nullptr, N, 4 * Cl, C));
  RETURN_IF_ERROR(TpAllReduce(acts.proj.data(), int64_t{N} * C));
  return be->ResidualForward(a.out.data(), a.res2.data(), acts.proj.data(), int64_t{N} * C);
}

absl::Status GptStage::BackwardInput(StageActivations& acts, const float* doutput,
                                     float loss_scale) {
  if (!acts.forward_done_) return absl::FailedPreconditionError("BackwardInput before Forward");
  const int N = acts.B_ * acts.T_, C = config_.n_embd, V = config_.vocab_size;
  Backend* be = backend_;
  float* dout = acts.dres_.back().data();  // gradient of the stage output
  if (stage_.has_head) {
    // dlogits overwrite the logits; dlnf (N,C) = dlogits (N,V) @ wte (V,C).
    RETURN_IF_ERROR(be->CrossEntropyBackward(acts.logits.data(), acts.probs.data(),
                                             acts.targets_.data(), loss_scale, N, V));
    RETURN_IF_ERROR(be->Gemm(false, false, N, C, V, 1.0f, acts.logits.data(), V, P(wte_), C, 0.0f,
                             acts.dlnf.data(), C));
    RETURN_IF_ERROR(be->Zero(dout, acts.dres_.back().bytes()));
    RETURN_IF_ERROR(be->LayerNormBackward(dout, G(lnf_w_), G(lnf_b_), acts.dlnf.data(),
                                          acts.output(), P(lnf_w_), acts.lnf_mean.data(),
                                          acts.lnf_rstd.data(), N, C));
  } else {
    if (doutput == nullptr) {
      return absl::InvalidArgumentError("a stage without the head needs its output's gradient");
    }
    RETURN_IF_ERROR(be->CopyOnDevice(dout, doutput, acts.dres_.back().bytes()));
  }
  for (int l = stage_.num_layers - 1; l >= 0; --l) {
    RETURN_IF_ERROR(StopRequested("backward pass", l));
    const float* x = l == 0 ? acts.input_.data() : acts.layers_[l - 1].out.data();
    RETURN_IF_ERROR(BlockBackwardInput(l, acts, x));
  }
  acts.backward_input_done_ = true;
  return absl::OkStatus();
}

absl::Status GptStage::BlockBackwardInput(int l, StageActivations& acts, const float* x) {
  const int B = acts.B_, T = acts.T_, N = B * T, C = config_.n_embd;
  const int Cl = C / tp_.size, NHl = config_.n_head / tp_.size;
  const int64_t NC = int64_t{N} * C;
  const LayerWeights& w = layers_[l];
  StageActivations::Layer& a = acts.layers_[l];
  Backend* be = backend_;
  const float* dout = acts.dres_[l + 1].data();  // grad of this block's output
  float* dx = acts.dres_[l].data();              // grad of this block's input
  // MLP branch: out = res2 + c_proj(gelu(c_fc(ln_2(res2)))).
  RETURN_IF_ERROR(be->MatmulBackwardInput(acts.dwide.data(), dout, P(w.mlp_proj_w), N, 4 * Cl, C,
                                          /*accumulate=*/false));
  RETURN_IF_ERROR(
      be->GeluBackward(a.dfch.data(), a.fch.data(), acts.dwide.data(), int64_t{N} * 4 * Cl));
  RETURN_IF_ERROR(be->MatmulBackwardInput(acts.dln.data(), a.dfch.data(), P(w.fc_w), N, C, 4 * Cl,
                                          /*accumulate=*/false));
  // Column-parallel c_fc: each rank holds part of d(ln_2); the sum is the conjugate all-reduce.
  RETURN_IF_ERROR(TpAllReduce(acts.dln.data(), NC));
  RETURN_IF_ERROR(be->CopyOnDevice(a.dres2.data(), dout, a.dres2.bytes()));  // residual path
  RETURN_IF_ERROR(be->LayerNormBackward(a.dres2.data(), G(w.ln2_w), G(w.ln2_b), acts.dln.data(),
                                        a.res2.data(), P(w.ln2_w), a.ln2_mean.data(),
                                        a.ln2_rstd.data(), N, C));
  // Attention branch: res2 = x + c_proj(attention(c_attn(ln_1(x)))).
  RETURN_IF_ERROR(be->MatmulBackwardInput(acts.datty.data(), a.dres2.data(), P(w.attn_proj_w), N,
                                          Cl, C, /*accumulate=*/false));
  RETURN_IF_ERROR(be->AttentionBackward(a.dqkv.data(), acts.datt.data(), acts.datty.data(),
                                        a.qkv.data(), a.att.data(), B, T, Cl, NHl));
  RETURN_IF_ERROR(be->MatmulBackwardInput(acts.dln.data(), a.dqkv.data(), P(w.qkv_w), N, C, 3 * Cl,
                                          /*accumulate=*/false));
  RETURN_IF_ERROR(TpAllReduce(acts.dln.data(), NC));
  RETURN_IF_ERROR(be->CopyOnDevice(dx, a.dres2.data(), a.dres2.bytes()));
  return be->LayerNormBackward(dx, G(w.ln1_w), G(w.ln1_b), acts.dln.data(), x, P(w.ln1_w),
                               a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
}

absl::Status GptStage::BackwardWeight(StageActivations& acts, const GradReadyFn& ready) {
  if (!acts.backward_input_done_) {
    return absl::FailedPreconditionError("BackwardWeight before BackwardInput");
  }
  const int B = acts.B_, T = acts.T_, N = B * T, C = config_.n_embd, V = config_.vocab_size;
  Backend* be = backend_;
  // Layout order (parameter_layout.cc): [wte, wpe] blocks... [ln_f, wte copy]. `done_from` is
  // where the finished suffix of the buffer starts.
  int64_t done_from = layout_.total_size();
  auto report = [&](int64_t begin) -> absl::Status {
    if (!ready || begin >= done_from) return absl::OkStatus();
    RETURN_IF_ERROR(be->Synchronize());  // the range's gradients are in memory
    const int64_t end = done_from;
    done_from = begin;
    return ready(begin, end);
  };
  if (stage_.has_head) {
    // dwte (V,C) += dlogits^T (V,N) @ lnf (N,C).
    RETURN_IF_ERROR(be->Gemm(true, false, V, C, N, 1.0f, acts.logits.data(), V, acts.lnf.data(), C,
                             1.0f, G(wte_), C));
    // ln_f's gradients came from BackwardInput; a stage with the embedding keeps wte in front,
    // unfinished until the embedding's backward.
    RETURN_IF_ERROR(report(lnf_w_));
  }
  for (int l = stage_.num_layers - 1; l >= 0; --l) {
    RETURN_IF_ERROR(StopRequested("weight gradients", l));
    RETURN_IF_ERROR(BlockBackwardWeight(l, acts));
    RETURN_IF_ERROR(report(layers_[l].ln1_w));
  }
  if (stage_.has_embedding) {
    RETURN_IF_ERROR(be->EmbeddingBackward(G(wte_), G(wpe_), acts.dres_.front().data(),
                                          acts.tokens_.data(), B, T, C));
  }
  RETURN_IF_ERROR(report(0));
  acts.backward_input_done_ = false;
  acts.forward_done_ = false;
  return absl::OkStatus();
}

absl::Status GptStage::BlockBackwardWeight(int l, StageActivations& acts) {
  const int N = acts.B_ * acts.T_, C = config_.n_embd, Cl = C / tp_.size;
  const LayerWeights& w = layers_[l];
  StageActivations::Layer& a = acts.layers_[l];
  Backend* be = backend_;
  RETURN_IF_ERROR(be->MatmulBackwardWeight(
      G(w.mlp_proj_w), G(w.mlp_proj_b), acts.dres_[l + 1].data(), a.fch_gelu.data(), N, 4 * Cl, C));
  RETURN_IF_ERROR(
      be->MatmulBackwardWeight(G(w.fc_w), G(w.fc_b), a.dfch.data(), a.ln2.data(), N, C, 4 * Cl));
  RETURN_IF_ERROR(be->MatmulBackwardWeight(G(w.attn_proj_w), G(w.attn_proj_b), a.dres2.data(),
                                           a.atty.data(), N, Cl, C));
  return be->MatmulBackwardWeight(G(w.qkv_w), G(w.qkv_b), a.dqkv.data(), a.ln1.data(), N, C,
                                  3 * Cl);
}

absl::Status GptStage::Backward(StageActivations& acts, const float* doutput, float loss_scale) {
  RETURN_IF_ERROR(BackwardInput(acts, doutput, loss_scale));
  return BackwardWeight(acts);
}

}  // namespace dtrain::model
