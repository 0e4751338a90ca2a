#include "worker/model/gpt_decoder.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::model {
namespace {

using kernels::Backend;
using kernels::DeviceBuffer;

absl::StatusOr<int64_t> OffsetOf(const ParameterLayout& layout, const std::string& name) {
  const ParameterTensor* t = layout.Find(name);
  if (t == nullptr) return absl::InternalError(absl::StrCat("the model has no tensor ", name));
  return t->offset;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GptDecoder>> GptDecoder::Create(GptStage* stage) {
  const GptConfig& config = stage->config();
  const StageSpec& s = stage->stage();
  if (stage->tp().size != 1 || s.first_layer != 0 || s.num_layers != config.n_layer ||
      !s.has_embedding || !s.has_head) {
    return absl::InvalidArgumentError(
        "the decoder needs the whole model on one worker (one stage, tp 1)");
  }
  std::unique_ptr<GptDecoder> d(new GptDecoder(stage));
  const ParameterLayout& layout = stage->layout();
  ASSIGN_OR_RETURN(d->wte_, OffsetOf(layout, "wte.weight"));
  ASSIGN_OR_RETURN(d->wpe_, OffsetOf(layout, "wpe.weight"));
  ASSIGN_OR_RETURN(d->lnf_w_, OffsetOf(layout, "ln_f.weight"));
  ASSIGN_OR_RETURN(d->lnf_b_, OffsetOf(layout, "ln_f.bias"));
  Backend* be = stage->backend();
  const int C = config.n_embd, T = config.context, V = config.vocab_size, NH = config.n_head;
  for (int l = 0; l < config.n_layer; ++l) {
    const std::string p = absl::StrCat("h.", l, ".");
    Layer layer;
    ASSIGN_OR_RETURN(layer.ln1_w, OffsetOf(layout, p + "ln_1.weight"));
    ASSIGN_OR_RETURN(layer.ln1_b, OffsetOf(layout, p + "ln_1.bias"));
    ASSIGN_OR_RETURN(layer.qkv_w, OffsetOf(layout, p + "attn.c_attn.weight"));
    ASSIGN_OR_RETURN(layer.qkv_b, OffsetOf(layout, p + "attn.c_attn.bias"));
    ASSIGN_OR_RETURN(layer.attn_proj_w, OffsetOf(layout, p + "attn.c_proj.weight"));
    ASSIGN_OR_RETURN(layer.attn_proj_b, OffsetOf(layout, p + "attn.c_proj.bias"));
    ASSIGN_OR_RETURN(layer.ln2_w, OffsetOf(layout, p + "ln_2.weight"));
    ASSIGN_OR_RETURN(layer.ln2_b, OffsetOf(layout, p + "ln_2.bias"));
    ASSIGN_OR_RETURN(layer.fc_w, OffsetOf(layout, p + "mlp.c_fc.weight"));
    ASSIGN_OR_RETURN(layer.fc_b, OffsetOf(layout, p + "mlp.c_fc.bias"));
    ASSIGN_OR_RETURN(layer.mlp_proj_w, OffsetOf(layout, p + "mlp.c_proj.weight"));
    ASSIGN_OR_RETURN(layer.mlp_proj_b, OffsetOf(layout, p + "mlp.c_proj.bias"));
    ASSIGN_OR_RETURN(layer.k, DeviceBuffer<float>::Create(be, size_t(T) * C));
    ASSIGN_OR_RETURN(layer.v, DeviceBuffer<float>::Create(be, size_t(T) * C));
    d->layers_.push_back(std::move(layer));
  }
  for (auto [buffer, size] :
       std::initializer_list<std::pair<DeviceBuffer<float>*, size_t>>{{&d->x_, C},
                                                                      {&d->res2_, C},
                                                                      {&d->ln_, C},
                                                                      {&d->qkv_, 3 * C},
                                                                      {&d->y_, C},
                                                                      {&d->proj_, C},
                                                                      {&d->fc_, 4 * C},
                                                                      {&d->fc_gelu_, 4 * C},
                                                                      {&d->logits_, V},
                                                                      {&d->scores_, size_t(NH) * T},
                                                                      {&d->probs_, size_t(NH) * T},
                                                                      {&d->losses_, NH},
                                                                      {&d->mean_, 1},
                                                                      {&d->rstd_, 1}}) {
    ASSIGN_OR_RETURN(*buffer, DeviceBuffer<float>::Create(be, size));
  }
  ASSIGN_OR_RETURN(d->token_, DeviceBuffer<int32_t>::Create(be, 1));
  ASSIGN_OR_RETURN(d->zero_targets_, DeviceBuffer<int32_t>::Create(be, NH));
  return d;
}

absl::StatusOr<std::vector<float>> GptDecoder::Next(int32_t token) {
  const GptConfig& config = stage_->config();
  const int C = config.n_embd, V = config.vocab_size, NH = config.n_head, hs = C / NH;
  if (token < 0 || token >= V) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", token, " is outside the vocabulary [0, ", V, ")"));
  }
  if (t_ >= config.context) {
    return absl::OutOfRangeError(
        absl::StrCat("the model's context is ", config.context, " tokens, all used"));
  }
  Backend* be = stage_->backend();
  const int t = t_, n = t + 1;  // position, and the rows attended to
  RETURN_IF_ERROR(token_.CopyFrom(absl::MakeConstSpan(&token, 1)));
  // x (1,C) = wte[token] + wpe[t]: the embedding of one row whose position table starts at t.
  RETURN_IF_ERROR(
      be->EmbeddingForward(x_.data(), token_.data(), P(wte_), P(wpe_) + int64_t{t} * C, 1, 1, C));
  for (Layer& w : layers_) {
    RETURN_IF_ERROR(be->LayerNormForward(ln_.data(), mean_.data(), rstd_.data(), x_.data(),
                                         P(w.ln1_w), P(w.ln1_b), 1, C));
    RETURN_IF_ERROR(
        be->MatmulForward(qkv_.data(), ln_.data(), P(w.qkv_w), P(w.qkv_b), 1, C, 3 * C));
    // The cache's row t: this token's k and v.
    RETURN_IF_ERROR(be->CopyOnDevice(w.k.data() + int64_t{t} * C, qkv_.data() + C, C * 4));
    RETURN_IF_ERROR(be->CopyOnDevice(w.v.data() + int64_t{t} * C, qkv_.data() + 2 * C, C * 4));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    for (int h = 0; h < NH; ++h) {
      // scores[h] (1,n) = q_h (1,hs) @ K_h^T (hs,n), K_h = columns [h*hs, (h+1)*hs) of k.
      RETURN_IF_ERROR(be->Gemm(false, true, 1, n, hs, scale, qkv_.data() + h * hs, 3 * C,
                               w.k.data() + h * hs, C, 0.0f, scores_.data() + h * n, n));
    }
    // probs (NH,n) = softmax of each row (the losses against target 0 are not used).
    RETURN_IF_ERROR(be->CrossEntropyForward(losses_.data(), probs_.data(), scores_.data(),
                                            zero_targets_.data(), NH, n));
    for (int h = 0; h < NH; ++h) {
      // y_h (1,hs) = probs[h] (1,n) @ V_h (n,hs).
      RETURN_IF_ERROR(be->Gemm(false, false, 1, hs, n, 1.0f, probs_.data() + h * n, n,
                               w.v.data() + h * hs, C, 0.0f, y_.data() + h * hs, C));
    }
    RETURN_IF_ERROR(
        be->MatmulForward(proj_.data(), y_.data(), P(w.attn_proj_w), P(w.attn_proj_b), 1, C, C));
    RETURN_IF_ERROR(be->ResidualForward(res2_.data(), x_.data(), proj_.data(), C));
    RETURN_IF_ERROR(be->LayerNormForward(ln_.data(), mean_.data(), rstd_.data(), res2_.data(),
                                         P(w.ln2_w), P(w.ln2_b), 1, C));
    RETURN_IF_ERROR(be->MatmulForward(fc_.data(), ln_.data(), P(w.fc_w), P(w.fc_b), 1, C, 4 * C));
    RETURN_IF_ERROR(be->GeluForward(fc_gelu_.data(), fc_.data(), 4 * C));
    RETURN_IF_ERROR(be->MatmulForward(proj_.data(), fc_gelu_.data(), P(w.mlp_proj_w),
                                      P(w.mlp_proj_b), 1, 4 * C, C));
    RETURN_IF_ERROR(be->ResidualForward(x_.data(), res2_.data(), proj_.data(), C));
  }
  RETURN_IF_ERROR(be->LayerNormForward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), P(lnf_w_),
                                       P(lnf_b_), 1, C));
  // logits (1,V) = ln (1,C) @ wte^T: the head is tied to the token embedding.
  RETURN_IF_ERROR(
      be->Gemm(false, true, 1, V, C, 1.0f, ln_.data(), C, P(wte_), C, 0.0f, logits_.data(), V));
  ++t_;
  return logits_.ToHost();
}

}  // namespace dtrain::model
