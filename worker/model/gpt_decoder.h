// GptDecoder: forward-only, one token at a time, with a KV cache: the model of a GptStage that
// holds the whole model (one stage, tp 1), for sampling (worker/sample_main.cc).
//
//   ASSIGN_OR_RETURN(auto stage, GptStage::Create(backend, config, {0, config.n_layer}, {}));
//   RETURN_IF_ERROR(LoadWeights("model.safetensors", *stage));
//   ASSIGN_OR_RETURN(auto decoder, GptDecoder::Create(stage.get()));
//   for (int32_t t : prompt) ASSIGN_OR_RETURN(logits, decoder->Next(t));   // (V) host
//   ... pick the next token from logits, feed it to Next, and so on up to config.context tokens.
//
// Next(token) at position t: the embedding of (token, t); in each block LayerNorm, the qkv
// projection of this one row, its k and v appended to row t of the layer's cache (T_max, C),
// then per head: scores (1, t+1) = q k^T / sqrt(hs) over the cached rows, softmax, y = p v; the
// projections, residuals and MLP as in GptStage::BlockForward; then ln_f and logits = x wte^T.
// Causality needs no mask: only rows 0..t are cached. Every op is the Backend's (GEMM, softmax
// from CrossEntropyForward's probabilities), so it runs on the CPU and CUDA backends alike.
#ifndef DTRAIN_WORKER_MODEL_GPT_DECODER_H_
#define DTRAIN_WORKER_MODEL_GPT_DECODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/device_buffer.h"
#include "worker/model/gpt_stage.h"

namespace dtrain::model {

class GptDecoder {
 public:
  // `stage` (not owned, outlives the decoder) must hold the whole model with tp size 1:
  // InvalidArgument otherwise.
  static absl::StatusOr<std::unique_ptr<GptDecoder>> Create(GptStage* stage);

  // Appends `token` at the next position; returns the logits (V) of the token after it.
  // InvalidArgument for a token outside the vocabulary; OutOfRange once config.context tokens
  // have been fed.
  absl::StatusOr<std::vector<float>> Next(int32_t token);

  int position() const { return t_; }  // tokens fed so far

 private:
  struct Layer {
    int64_t ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
    int64_t ln2_w, ln2_b, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
    kernels::DeviceBuffer<float> k, v;  // (T_max, C): rows 0..t-1 filled
  };
  explicit GptDecoder(GptStage* stage) : stage_(stage) {}
  const float* P(int64_t offset) const { return stage_->params() + offset; }

  GptStage* stage_;
  std::vector<Layer> layers_;
  int64_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  int t_ = 0;
  // One row each: x (C) the residual stream, ln (C), qkv (3C), y (C), proj (C), fc (4C),
  // fc_gelu (4C), logits (V); scores and probs (NH, T_max); mean, rstd (1); a zero target.
  kernels::DeviceBuffer<float> x_, res2_, ln_, qkv_, y_, proj_, fc_, fc_gelu_, logits_;
  kernels::DeviceBuffer<float> scores_, probs_, losses_, mean_, rstd_;
  kernels::DeviceBuffer<int32_t> token_, zero_targets_;
};

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_GPT_DECODER_H_
