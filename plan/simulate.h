// A discrete-event simulator of one training step of a pipeline: every stage runs its action
// list strictly in order (Execution::kFixedOrder), or runs the first action ready_work.h's rules
// allow whose inputs have arrived (kReadyWork: the earliest to become ready when none is, the
// list's first on a tie); an action starts when the stage is free and its inputs have arrived,
// and runs for a fixed cost. It gives each stage's timeline, busy time, bubble (idle) fraction
// and peak live activations, or a deadlock report when the lists wait on each other.
//
// Dependencies (model chunk k = chunk * p + stage; K = p * v chunks in all):
//   F(mb, k)    needs F(mb, k-1) done (k > 0), plus `latency` when k-1 is on another stage
//   B(mb, k)    needs its own F(mb, k), and B(mb, k+1) done (k < K-1) plus `latency`
//               (B here is kBackwardInput or the fused kBackward: both send the input gradient;
//               the fused one after its B part or after all of it, by GradientRelease)
//   W(mb, k)    needs its own B(mb, k)
// Sends never block (a receiver buffers what arrives early), matching an executor that posts
// its receives ahead. Costs are per micro-batch per chunk; a fused kBackward costs
// backward_input + backward_weight.
//
//   ASSIGN_OR_RETURN(SimResult r, SimulateSchedule({ScheduleKind::kOneFOneB, 4, 8, 1},
//                                                 std::vector<StageCosts>(4, {1, 1, 1}), 0,
//                                                 Execution::kFixedOrder,
//                                                 GradientRelease::kAfterWeights));
//   r.bubble_fraction;  // 3/11 = (p-1)/(m+p-1), the textbook; 6/30 with kAfterInput
#ifndef DTRAIN_PLAN_SIMULATE_H_
#define DTRAIN_PLAN_SIMULATE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "plan/ready_work.h"
#include "plan/schedule.h"

namespace dtrain::pipeline {

// Time one micro-batch takes through one chunk of a stage, in any unit (the results use it).
struct StageCosts {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
};

struct TimedAction {
  Action action;
  double start = 0;
  double end = 0;
};

struct StageResult {
  std::vector<TimedAction> timeline;  // the stage's actions in order, with their times
  double busy = 0;                    // sum of the action durations
  double bubble_fraction = 0;         // 1 - busy / makespan (0 when the makespan is 0)
  // Most micro-batch-chunks held at once between the end of their F and the end of their
  // backward (W, or the fused kBackward): the activation memory the stage needs.
  int peak_live = 0;
  // The same, counting only until the end of B (kBackwardInput or kBackward): the activations
  // B reads; W holds only the layer inputs and output gradients. Equals peak_live for fused.
  int peak_awaiting_input_grad = 0;
};

struct SimResult {
  std::vector<StageResult> stages;
  double makespan = 0;         // the latest end over all stages (all start at 0)
  double bubble_fraction = 0;  // 1 - sum(busy) / (p * makespan)
};

// Simulates arbitrary per-stage action lists (stage_actions[s] for stage s; p = its size, v =
// `virtual_stages`, m = `micro_batches`); costs[s] for stage s (p entries).
// Errors: InvalidArgument for a list with an action outside 0..m-1 / 0..v-1, a repeated action,
// costs of the wrong size or negative; FailedPrecondition "deadlock: ..." naming each blocked
// stage, the action it waits at and what for, when no stage can proceed but actions remain:
//   "deadlock: stage 0 waits at BW0 for the input gradient of micro-batch 0 from stage 1;
//    stage 1 waits at F1 for the activation of micro-batch 1 from stage 0"
absl::StatusOr<SimResult> SimulateActions(const std::vector<std::vector<Action>>& stage_actions,
                                          int micro_batches, int virtual_stages,
                                          absl::Span<const StageCosts> costs, double latency,
                                          Execution execution = Execution::kFixedOrder,
                                          GradientRelease release = GradientRelease::kAfterInput);

// StageActions of every stage of `spec` (validated), simulated.
absl::StatusOr<SimResult> SimulateSchedule(const ScheduleSpec& spec,
                                           absl::Span<const StageCosts> costs, double latency,
                                           Execution execution = Execution::kFixedOrder,
                                           GradientRelease release = GradientRelease::kAfterInput);

}  // namespace dtrain::pipeline

#endif  // DTRAIN_PLAN_SIMULATE_H_
