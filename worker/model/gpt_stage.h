// GptStage: the part of a GPT-2 model one worker computes — a range of transformer blocks, plus
// the embedding on the first stage and the final LayerNorm + tied LM head on the last. With one
// stage holding everything and tp size 1 it is the whole model.
//
// Forward and backward are separate calls on a StageActivations (one per micro-batch in flight),
// and backward is split into BackwardInput (activation gradients: the "B" of zero-bubble
// schedules, ending in the gradient to send to the previous stage) and BackwardWeight (parameter
// gradients from the saved activation gradients: the "W"). Backward() runs both.
//
//   ASSIGN_OR_RETURN(auto stage, GptStage::Create(backend, config, {0, config.n_layer}, {}));
//   ASSIGN_OR_RETURN(auto acts, stage->NewActivations(B, T));
//   RETURN_IF_ERROR(stage->Forward(*acts, {.tokens = inputs, .targets = targets}));
//   RETURN_IF_ERROR(stage->Backward(*acts, /*doutput=*/nullptr, /*loss_scale=*/1.0f / (B * T)));
#ifndef DTRAIN_WORKER_MODEL_GPT_STAGE_H_
#define DTRAIN_WORKER_MODEL_GPT_STAGE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "worker/model/config.h"
#include "worker/model/parameter_layout.h"

namespace dtrain::model {

// Sums `n` floats at a device pointer across the tensor-parallel group, in place. Empty when
// tp size is 1.
using AllReduceSumFn = std::function<absl::Status(float* data, int64_t n)>;

struct StageInput {
  absl::Span<const int32_t> tokens;   // first stage: (B,T) token ids, host memory
  absl::Span<const int32_t> targets;  // last stage: (B,T) next-token ids, host memory
  const float* activation = nullptr;  // other stages: (B,T,C) device memory from the previous
};

class StageActivations;

class GptStage {
 public:
  // `tp_all_reduce` must be set when tp.size > 1.
  static absl::StatusOr<std::unique_ptr<GptStage>> Create(kernels::Backend* backend,
                                                          const GptConfig& config,
                                                          const StageSpec& stage,
                                                          const TensorParallelSpec& tp,
                                                          AllReduceSumFn tp_all_reduce = {});
  ~GptStage();

  const GptConfig& config() const { return config_; }
  const StageSpec& stage() const { return stage_; }
  const TensorParallelSpec& tp() const { return tp_; }
  const ParameterLayout& layout() const { return layout_; }
  kernels::Backend* backend() const { return backend_; }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  // Keeps the gradients in `storage` (layout().total_size() floats, zeroed here, owned by the
  // caller and alive as long as this stage) instead of memory of its own: the data-parallel
  // buffer that the group's ranks share on one host (comm/collectives/allreduce_shared.h).
  // FailedPrecondition unless the backend's device memory is host memory; InvalidArgument for
  // another size.
  absl::Status UseGradientStorage(absl::Span<float> storage);

  absl::Status ZeroGrads();

  // A cancel that reaches a step in progress: once `*stop` is true, Forward, BackwardInput and
  // BackwardWeight return Cancelled ("stopped in the forward pass before layer 3 of 8") at the
  // next transformer block instead of finishing the micro-batch, whose results are then
  // meaningless (the parameters are untouched: only the optimizer changes them). Null: never.
  // The flag must outlive the stage.
  void set_stop_flag(const std::atomic<bool>* stop) { stop_ = stop; }

  // Buffers for one micro-batch of B sequences of T tokens (T <= context).
  absl::StatusOr<std::unique_ptr<StageActivations>> NewActivations(int B, int T);

  // Runs the stage on one micro-batch. Tokens and targets are checked against the vocabulary.
  absl::Status Forward(StageActivations& acts, const StageInput& input);
  // Activation gradients. `doutput` (B,T,C) device: gradient of this stage's output (null on the
  // last stage, which starts from the loss; `loss_scale` is d(loss)/d(per-token loss), e.g.
  // 1/(B*T) for a mean over one micro-batch). Leaves acts.input_grad() for the previous stage.
  absl::Status BackwardInput(StageActivations& acts, const float* doutput, float loss_scale);
  // Parameter gradients (+=) from what BackwardInput saved. `ready`, when set, is called with
  // each range [begin, end) of the parameter buffer as soon as this call has finished adding
  // to it: the head's end of the buffer (ln_f, the tied head copy) first, then each block from
  // the last, then the embedding. The ranges tile the buffer in reverse order; data-parallel
  // gradient buckets start reducing from it while the earlier blocks still compute.
  using GradReadyFn = std::function<absl::Status(int64_t begin, int64_t end)>;
  absl::Status BackwardWeight(StageActivations& acts, const GradReadyFn& ready = {});
  absl::Status Backward(StageActivations& acts, const float* doutput, float loss_scale);

 private:
  struct LayerWeights;  // offsets of one block's tensors
  GptStage(kernels::Backend* backend, const GptConfig& config, const StageSpec& stage,
           const TensorParallelSpec& tp, AllReduceSumFn all_reduce, ParameterLayout layout);
  absl::Status ResolveOffsets();
  absl::Status TpAllReduce(float* data, int64_t n);
  absl::Status StopRequested(const char* pass, int l) const;
  absl::Status BlockForward(int l, StageActivations& acts, const float* x);
  absl::Status BlockBackwardInput(int l, StageActivations& acts, const float* x);
  absl::Status BlockBackwardWeight(int l, StageActivations& acts);
  float* P(int64_t offset) { return params_.data() + offset; }
  float* G(int64_t offset) { return grads_.data() + offset; }

  kernels::Backend* backend_;
  GptConfig config_;
  StageSpec stage_;
  TensorParallelSpec tp_;
  AllReduceSumFn all_reduce_;
  ParameterLayout layout_;
  kernels::DeviceBuffer<float> params_;
  kernels::DeviceBuffer<float> grads_;
  std::vector<LayerWeights> layers_;
  int64_t wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1;
  const std::atomic<bool>* stop_ = nullptr;
};

// Everything one micro-batch keeps between forward and backward. Sizes use the local widths
// under tensor parallelism: Cl = C/tp, NHl = NH/tp.
class StageActivations {
 public:
  int B() const { return B_; }
  int T() const { return T_; }
  // (B,T,C): this stage's output (send to the next stage).
  const float* output() const;
  // (B,T,C): gradient of this stage's input (send to the previous stage), after BackwardInput.
  const float* input_grad() const { return dres_.front().data(); }
  // Mean loss of the micro-batch (last stage, after Forward). Synchronizes.
  absl::StatusOr<double> MeanLoss() const;

 private:
  friend class GptStage;
  struct Layer {
    kernels::DeviceBuffer<float> ln1, ln1_mean, ln1_rstd;  // (N,C), (N), (N)
    kernels::DeviceBuffer<float> qkv;                      // (N,3Cl)
    kernels::DeviceBuffer<float> atty;                     // (N,Cl)
    kernels::DeviceBuffer<float> att;                      // (B,NHl,T,T)
    kernels::DeviceBuffer<float> res2;                     // (N,C) x + attn
    kernels::DeviceBuffer<float> ln2, ln2_mean, ln2_rstd;  // (N,C), (N), (N)
    kernels::DeviceBuffer<float> fch, fch_gelu;            // (N,4Cl)
    kernels::DeviceBuffer<float> out;                      // (N,C) res2 + mlp
    // Saved by BackwardInput for BackwardWeight.
    kernels::DeviceBuffer<float> dres2;  // (N,C) grad of res2
    kernels::DeviceBuffer<float> dfch;   // (N,4Cl) grad before GELU
    kernels::DeviceBuffer<float> dqkv;   // (N,3Cl)
  };
  StageActivations() = default;

  kernels::Backend* backend_ = nullptr;
  int B_ = 0, T_ = 0;
  kernels::DeviceBuffer<int32_t> tokens_, targets_;  // (N)
  kernels::DeviceBuffer<float> input_;               // (N,C) embedding or received input
  std::vector<Layer> layers_;
  // dres_[l]: gradient of layer l's input; dres_[L] of the stage output. (N,C) each.
  std::vector<kernels::DeviceBuffer<float>> dres_;
  // Head (last stage).
  kernels::DeviceBuffer<float> lnf, lnf_mean, lnf_rstd;  // (N,C), (N), (N)
  kernels::DeviceBuffer<float> logits;                   // (N,V); dlogits after BackwardInput
  kernels::DeviceBuffer<float> probs;                    // (N,V)
  kernels::DeviceBuffer<float> losses;                   // (N)
  kernels::DeviceBuffer<float> dlnf;                     // (N,C)
  // Scratch shared by the layers.
  kernels::DeviceBuffer<float> proj;   // (N,C) matmul output before residual
  kernels::DeviceBuffer<float> dwide;  // (N,4Cl) grad after GELU
  kernels::DeviceBuffer<float> datty;  // (N,Cl)
  kernels::DeviceBuffer<float> dln;    // (N,C)
  kernels::DeviceBuffer<float> datt;   // (B,NHl,T,T)
  bool forward_done_ = false;
  bool has_loss_ = false;  // losses hold the last Forward's values
  bool backward_input_done_ = false;
  float loss_scale_ = 0.0f;
};

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_GPT_STAGE_H_
