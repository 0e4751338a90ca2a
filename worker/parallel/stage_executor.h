// StageExecutor: runs one pipeline stage's schedule for one training step — the actions of
// plan/schedule.h on this rank's chunks, with activations and gradients streamed to
// and from the neighbouring stages (comm::StageLinks).
//
// A chunk is one GptStage; model chunk k = chunk * pp + pp_rank of K = pp * v. F of
// (micro-batch, chunk) receives its input from model chunk k-1 (unless k == 0, which embeds the
// tokens), runs Forward and sends the output to chunk k+1 (unless k == K-1, which computes the
// loss). B receives the output gradient from chunk k+1 (k == K-1 starts from the loss), runs
// BackwardInput and sends the input gradient to chunk k-1. W runs BackwardWeight. Messages are
// keyed (step, micro-batch, receiving model chunk).
//
// Order: with Execution::kFixedOrder the actions run in the list's order and a stage waits in
// its next action's receive. With kReadyWork (plan/ready_work.h) the stage runs the first action
// the rules allow whose input has arrived (Transport::Arrived): a stage whose next receive is
// not there runs a deferred W, or an F or B further down its list, instead of blocking; each
// kind keeps the list's order, so gradients are bit-identical, and the live micro-batches stay
// within the list's peak. When nothing allowed has arrived it polls; after kPollBeforeBlocking
// it waits in the list's next action's receive, as the fixed order does (its deadline and its
// flight record). trace() and the flight recorder hold the order actually run.
//
// Memory: each (micro-batch, chunk) in flight holds one StageActivations from its F until its
// W; they come from a per-chunk pool, so what is allocated is about the peak the schedule
// needs (GPipe: m; 1F1B: p - s on stage s). A finished micro-batch's buffers are reused only
// once its sends have left (sends are zero-copy), so a slow receiver can add a few.
//
// Device memory: what is sent is staged to host memory first and what is received is copied to
// the device (DeviceStaging: pinned buffers, the copy stream, events); on the CPU backend the
// transport reads and writes the device buffers directly.
#ifndef DTRAIN_WORKER_PARALLEL_STAGE_EXECUTOR_H_
#define DTRAIN_WORKER_PARALLEL_STAGE_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kernels/device_buffer.h"
#include "plan/ready_work.h"
#include "plan/schedule.h"
#include "worker/comm/p2p.h"
#include "worker/model/gpt_stage.h"
#include "worker/parallel/device_staging.h"

namespace dtrain::parallel {

struct MicroBatch {
  absl::Span<const int32_t> tokens;   // (b,T): needed by model chunk 0
  absl::Span<const int32_t> targets;  // (b,T): needed by model chunk K-1
};

// Where one step's time went on this rank (seconds).
struct StepTimes {
  double compute = 0;  // Forward / BackwardInput / BackwardWeight, minus tp all-reduces
  double wait = 0;     // blocked receiving from a neighbour stage: the pipeline bubble
  double send = 0;     // waiting for sends to complete
  // The compute split by action kind (B and W of a fused backward counted apart).
  double forward = 0, backward_input = 0, backward_weight = 0;
};

class StageExecutor {
 public:
  // `chunks[j]` is virtual stage j of this rank, holding model chunk j * pp + pp_rank.
  // `loss_scale` is d(step loss)/d(token loss): 1 / (B * T) over the whole batch.
  // `staging` (outliving this) stages sends and receives.
  StageExecutor(std::vector<model::GptStage*> chunks, int pp, int pp_rank, comm::StageLinks* links,
                DeviceStaging* staging, int micro_batch_rows, int seq, float loss_scale);

  // How RunStep orders the actions (default: the list's order). Ready work needs a stage whose
  // actions run no collectives of their own (tp = 1): a tp group's ranks must agree on the order.
  void set_execution(pipeline::Execution execution) { execution_ = execution; }
  pipeline::Execution execution() const { return execution_; }
  // When a fused backward (1F1B, GPipe, interleaved) sends its input gradient: after its B part
  // (the default) or, to measure the textbook schedule against, after its W too.
  void set_gradient_release(pipeline::GradientRelease release) { gradient_release_ = release; }

  // How long ready work polls for an input before it waits in the list's next action.
  static constexpr absl::Duration kPollBeforeBlocking = absl::Seconds(1);

  // Runs `actions` (this stage's schedule) for `step`. `data(mb)` gives micro-batch mb's
  // tokens/targets. `weights_final(j)` is called when chunk j's last W of the step starts, and
  // returns the GradReadyFn that BackwardWeight reports its finished ranges to.
  absl::Status RunStep(int64_t step, absl::Span<const pipeline::Action> actions,
                       const std::function<MicroBatch(int mb)>& data,
                       const std::function<model::GptStage::GradReadyFn(int chunk)>& weights_final,
                       StepTimes* times);

  // A forward-only pass (validation): `forwards`, F actions only (a schedule's, in its order;
  // their micro-batch numbers are the keys of their messages and the argument of `data`), each
  // micro-batch retired after its F: no backward, no gradient touched. losses() then holds the
  // last model chunk's losses by micro-batch number; trace() is left as the last step's.
  absl::Status RunForward(int64_t step, absl::Span<const pipeline::Action> forwards,
                          const std::function<MicroBatch(int mb)>& data, StepTimes* times);

  // Test-only (dtrain-worker --test_only_forward_delay): F of micro-batch 0 of `step` on this
  // rank's first chunk sleeps `delay` after its input arrived and before it computes, so the
  // flight recorder shows the rank in F, not in a receive: a rank stuck in compute.
  void SetTestOnlyForwardDelay(int64_t step, absl::Duration delay) {
    forward_delay_step_ = step;
    forward_delay_ = delay;
  }

  // Per micro-batch mean losses of the last step, when this rank holds model chunk K-1.
  const std::vector<double>& losses() const { return losses_; }
  const std::vector<pipeline::Action>& trace() const { return trace_; }
  // Most (micro-batch, chunk) activations held at once, over all steps run.
  int peak_live() const { return peak_live_; }

 private:
  struct InFlight {
    std::unique_ptr<model::StageActivations> acts;
    comm::SendHandle activation_sent;  // to model chunk k+1
    comm::SendHandle gradient_sent;    // to model chunk k-1
    // The host copies those sends read (pinned, back to the pool once the sends have left).
    StagedTensor activation_host, gradient_host;
  };
  int ModelChunk(int j) const { return j * pp_ + pp_rank_; }
  // Whether `a`'s input (the activation for F, the output gradient for B) is here, or it needs
  // none.
  bool InputArrived(int64_t step, const pipeline::Action& a);
  // The action to run next under `work`'s rules: the first allowed whose input has arrived;
  // time spent polling counts as wait.
  pipeline::Action Next(int64_t step, const pipeline::ReadyWork& work, StepTimes* times);
  absl::Status Forward(int64_t step, const pipeline::Action& a, const MicroBatch& mb,
                       StepTimes* times);
  // B; sends the input gradient unless `send` is false (then SendInputGradient does, later).
  absl::Status BackwardInput(int64_t step, const pipeline::Action& a, StepTimes* times,
                             bool send = true);
  absl::Status SendInputGradient(int64_t step, const pipeline::Action& a);
  absl::Status BackwardWeight(const pipeline::Action& a, const model::GptStage::GradReadyFn& ready,
                              StepTimes* times);
  // The micro-batch is done on this chunk; its buffers are reused once its sends have left.
  void Retire(int chunk, int mb);
  // A StageActivations for `chunk`: a free one, one whose sends have finished, or a new one.
  absl::StatusOr<std::unique_ptr<model::StageActivations>> Acquire(int chunk);
  // Waits for every retired micro-batch's sends (end of step: every receiver has run all of
  // its actions' receives by then or will, without waiting for this rank).
  absl::Status DrainAll(StepTimes* times);
  // Receives (key, shape) into recv_device_ through a staging buffer.
  absl::Status Receive(bool activation, const comm::StageKey& key,
                       const std::vector<int64_t>& shape, StepTimes* times);

  std::vector<model::GptStage*> chunks_;
  int pp_, pp_rank_, num_model_chunks_;
  comm::StageLinks* links_;
  int b_, T_;
  float loss_scale_;
  DeviceStaging* staging_;
  kernels::DeviceBuffer<float> recv_device_;  // (b,T,C) the received tensor, on the device
  std::vector<std::vector<std::unique_ptr<model::StageActivations>>> free_;  // per chunk
  std::map<std::pair<int, int>, InFlight> in_flight_;                        // (chunk, mb)
  // Retired micro-batches whose sends may still read their buffers, per chunk. Not waited for
  // at retirement: with interleaving the receiver may first need something this rank sends
  // later, so blocking here could deadlock.
  std::vector<std::vector<InFlight>> draining_;
  std::vector<double> losses_;
  std::vector<pipeline::Action> trace_;
  int peak_live_ = 0;
  pipeline::Execution execution_ = pipeline::Execution::kFixedOrder;
  pipeline::GradientRelease gradient_release_ = pipeline::GradientRelease::kAfterInput;
  int64_t forward_delay_step_ = 0;
  absl::Duration forward_delay_ = absl::ZeroDuration();
};

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_STAGE_EXECUTOR_H_
