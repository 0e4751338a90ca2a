// The allowed reorderings of a stage's schedule: which actions may run before which when the
// executor runs the work that is ready (Execution::kReadyWork) instead of the list's order, so a
// stage whose next receive has not arrived runs a deferred W, or another F or B whose input is
// there, rather than block. One rule set, used by the executor (worker/parallel), the simulator
// (simulate.h) and the trace check (CheckReadyTrace).
//
// The rules, for stage s with list L = StageActions(spec, s):
//   1. Each kind keeps L's order within itself: the F's run in L's order, the B's (B, or the
//      fused BW) in L's order, the W's in L's order. B sums into the LayerNorm gradients and W
//      into the matrices and embeddings (worker/model/gpt_stage.h), so with each kind's sums
//      in one order the gradients are bit-identical to L's order, whatever the interleaving.
//   2. The dependency DAG: B(mb, c) after F(mb, c) on this stage; W(mb, c) after B(mb, c).
//      Across stages (the executor's receives; the simulator's ready times): F(mb, k) after
//      F(mb, k-1) has sent its activation, B(mb, k) after B(mb, k+1) has sent its gradient
//      (k: the model chunk).
//   3. Memory: at most as many (micro-batch, chunk)s live (F run, W not yet) as L ever holds, and
//      at most as many awaiting their B (F run, B not yet) as L ever holds.
// Of the actions these allow, the executor runs the first in L's order whose input is there.
// L's next action (its first not yet run) is always allowed: the ones before it have run, and
// running others early only ends B's and W's sooner (rule 3 can only loosen), so a stage never
// waits on its own rules, only on a neighbour, and a run cannot deadlock where L does not.
//
//   ReadyWork work(actions, Execution::kReadyWork);
//   while (!work.finished()) {
//     for (const Action& a : work.Allowed()) if (InputArrived(a)) { Run(a); work.Ran(a); break; }
//   }
#ifndef DTRAIN_PLAN_READY_WORK_H_
#define DTRAIN_PLAN_READY_WORK_H_

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "plan/schedule.h"

namespace dtrain::pipeline {

enum class Execution {
  kFixedOrder,  // the list's order; a stage waits at its next action's receive
  kReadyWork,   // the rules above: the first allowed action whose input has arrived
};
std::string ExecutionName(Execution execution);  // "fixed order", "ready work"

// How a stage runs its schedule: `requested` when set, else ready work for ZB-H1 (its deferred
// W's are there to fill whatever gap opens) and the list's order for the others (their
// definitions are orders: GPipe's forwards first, 1F1B's p - s live micro-batches). Always the
// list's order with tp > 1: a tp group's ranks all-reduce inside their actions, so they must
// run them in one order.
Execution ChooseExecution(ScheduleKind kind, int tp, std::optional<Execution> requested);

class ReadyWork {
 public:
  // `actions`: one stage's list (StageActions), each action at most once.
  ReadyWork(absl::Span<const Action> actions, Execution execution);

  bool finished() const { return ran_ == static_cast<int>(list_.size()); }
  // The actions the stage's own rules (1-3) allow now, in L's order, L's next action first; at
  // most one of each kind. Fixed order: L's next action only. Empty once finished.
  std::vector<Action> Allowed() const;
  // Records that `a` ran. FailedPrecondition naming the broken rule unless Allowed() has it.
  absl::Status Ran(const Action& a);

  // L's next action's position (L's size once finished).
  int next_in_list() const;
  // Live (F run, W not) and awaiting B (F run, B not) now, and their bounds (L's peaks).
  int live() const { return live_; }
  int max_live() const { return max_live_; }
  int awaiting() const { return awaiting_; }
  int max_awaiting() const { return max_awaiting_; }

 private:
  enum Kind { kF = 0, kB = 1, kW = 2 };
  static Kind KindOf(ActionType type);
  // Why `a` may not run now (rules 1-3), or "" when it may.
  std::string Forbidden(const Action& a) const;

  std::vector<Action> list_;
  Execution execution_;
  std::vector<int> by_kind_[3];  // positions in list_ of each kind, in order
  int next_[3] = {0, 0, 0};      // next index into by_kind_
  std::vector<bool> done_;       // per list position
  std::set<std::pair<int, int>> forward_done_, input_done_;  // (micro-batch, chunk)
  int ran_ = 0;
  int live_ = 0, awaiting_ = 0, max_live_ = 0, max_awaiting_ = 0;
};

// Checks a recorded trace of stage `stage` run under `execution`: every action of
// StageActions(spec, stage) once, each allowed when it ran. Fixed order: CheckTrace (the list's
// order exactly). Ready work: FailedPrecondition naming the first position whose action the
// rules did not allow, and the rule ("W3 before W2: W's run in the schedule's order").
absl::Status CheckExecutedTrace(const ScheduleSpec& spec, int stage, Execution execution,
                                absl::Span<const Action> trace);

}  // namespace dtrain::pipeline

#endif  // DTRAIN_PLAN_READY_WORK_H_
