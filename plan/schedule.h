// Pipeline schedules as data: for each pipeline stage, the ordered list of actions it runs in
// one training step. The executor (worker/parallel/) runs the list; `dtrain plan` simulates it
// (simulate.h); tests check a recorded trace against the definition (CheckTrace).
//
// Vocabulary: p stages, m micro-batches per step, v virtual stages (chunks) per stage. Model
// chunk k = chunk * p + stage (interleaved: stage s holds chunks s, p+s, 2p+s, ...). F = forward
// of one micro-batch through one chunk; B = its input-gradient backward; W = its weight-gradient
// backward; kBackward = B and W fused (every schedule except zero-bubble).
//
//   ASSIGN_OR_RETURN(ScheduleSpec spec, ...);  // {kOneFOneB, 4 stages, 8 micro-batches}
//   ASSIGN_OR_RETURN(std::vector<Action> actions, StageActions(spec, /*stage=*/0));
//   // F0 F1 F2 F3 B0 F4 B1 F5 ... B7
#ifndef DTRAIN_PLAN_SCHEDULE_H_
#define DTRAIN_PLAN_SCHEDULE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dtrain::pipeline {

enum class ScheduleKind {
  kGpipe,         // all F, then all B (fused with W)
  kOneFOneB,      // p-s-1 warm-up F, then alternate F/B, then cool-down B (PipeDream-flush)
  kInterleaved,   // Megatron interleaved 1F1B over v chunks per stage; m % p == 0
  kZeroBubbleH1,  // 1F1B with B and W split, W deferred to fill the bubbles (Qi et al. ZB-H1)
};

// "gpipe", "1f1b", "interleaved", "zb-h1" (the job spec's names). InvalidArgument otherwise,
// listing the valid names.
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);
std::string ScheduleName(ScheduleKind kind);

enum class ActionType {
  kForward,         // F
  kBackward,        // B and W fused (non-zero-bubble schedules)
  kBackwardInput,   // B (zero-bubble)
  kBackwardWeight,  // W (zero-bubble)
};

// When a fused backward (kBackward) hands its input gradient to the previous stage.
enum class GradientRelease {
  // As soon as its B part is done, before its W: what the StageExecutor does, so the previous
  // stage's backward overlaps this stage's weight gradients. 1F1B's bubble is then (p-1)(F+B).
  kAfterInput,
  // After the whole backward, B and W: the textbook 1F1B and GPipe (Megatron-LM's, and the
  // baseline of the zero-bubble paper), whose bubble is (p-1)(F+B+W). For the benchmark that
  // measures against it and for the closed forms.
  kAfterWeights,
};

struct Action {
  ActionType type = ActionType::kForward;
  int micro_batch = 0;  // 0..m-1
  int chunk = 0;        // virtual stage on this pipeline stage, 0..v-1
  bool operator==(const Action& o) const {
    return type == o.type && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int stages = 1;          // p >= 1
  int micro_batches = 1;   // m >= 1
  int virtual_stages = 1;  // v: 1, except kInterleaved (v >= 2, p >= 2, m % p == 0)
};

// InvalidArgument naming the field and the rule ("interleaved needs micro_batches (6) to be a
// multiple of stages (4)").
absl::Status ValidateSchedule(const ScheduleSpec& spec);

// The actions stage `stage` runs in one step, in order. Every (micro-batch, chunk) gets one F
// and either one kBackward or one B and one W.
absl::StatusOr<std::vector<Action>> StageActions(const ScheduleSpec& spec, int stage);

// "F3", "B3", "W3", "BW3" (fused); with v > 1 the chunk follows: "F3.1".
std::string ActionToString(const Action& action);
std::string TraceToString(absl::Span<const Action> trace);  // space-separated

// Checks a recorded trace of stage `stage` against the schedule's definition: it must equal
// StageActions(spec, stage) (order included). On a mismatch, FailedPrecondition naming the
// first differing position and both actions, plus the broken rule when one is (an F, B or W
// missing or repeated, B before its F, W before its B, warm-up depth).
absl::Status CheckTrace(const ScheduleSpec& spec, int stage, absl::Span<const Action> trace);

}  // namespace dtrain::pipeline

#endif  // DTRAIN_PLAN_SCHEDULE_H_
