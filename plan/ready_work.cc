#include "plan/ready_work.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dtrain::pipeline {

std::string ExecutionName(Execution execution) {
  return execution == Execution::kReadyWork ? "ready work" : "fixed order";
}

Execution ChooseExecution(ScheduleKind kind, int tp, std::optional<Execution> requested) {
  if (tp > 1) return Execution::kFixedOrder;
  if (requested.has_value()) return *requested;
  return kind == ScheduleKind::kZeroBubbleH1 ? Execution::kReadyWork : Execution::kFixedOrder;
}

ReadyWork::Kind ReadyWork::KindOf(ActionType type) {
  switch (type) {
    case ActionType::kForward:
      return kF;
    case ActionType::kBackward:
    case ActionType::kBackwardInput:
      return kB;
    case ActionType::kBackwardWeight:
      return kW;
  }
  return kF;
}

ReadyWork::ReadyWork(absl::Span<const Action> actions, Execution execution)
    : list_(actions.begin(), actions.end()), execution_(execution), done_(actions.size(), false) {
  int live = 0, awaiting = 0;
  for (int i = 0; i < static_cast<int>(list_.size()); ++i) {
    const ActionType t = list_[i].type;
    by_kind_[KindOf(t)].push_back(i);
    if (t == ActionType::kForward) ++live, ++awaiting;
    if (t == ActionType::kBackward || t == ActionType::kBackwardInput) --awaiting;
    if (t == ActionType::kBackward || t == ActionType::kBackwardWeight) --live;
    max_live_ = std::max(max_live_, live);
    max_awaiting_ = std::max(max_awaiting_, awaiting);
  }
}

int ReadyWork::next_in_list() const {
  int next = static_cast<int>(list_.size());
  for (int k = 0; k < 3; ++k) {
    if (next_[k] < static_cast<int>(by_kind_[k].size()))
      next = std::min(next, by_kind_[k][next_[k]]);
  }
  return next;
}

std::string ReadyWork::Forbidden(const Action& a) const {
  const Kind kind = KindOf(a.type);
  const std::vector<int>& of_kind = by_kind_[kind];
  auto it = std::find_if(of_kind.begin(), of_kind.end(), [&](int i) { return list_[i] == a; });
  if (it == of_kind.end()) return absl::StrCat(ActionToString(a), " is not in the schedule");
  const int position = static_cast<int>(it - of_kind.begin());
  if (position < next_[kind]) return absl::StrCat(ActionToString(a), " already ran");
  const std::string name = ActionToString(a);
  if (position > next_[kind]) {
    const char* kinds[] = {"F's", "B's", "W's"};
    return absl::StrCat(name, " before ", ActionToString(list_[of_kind[next_[kind]]]), ": ",
                        kinds[kind], " run in the schedule's order");
  }
  if (execution_ == Execution::kFixedOrder && of_kind[position] != next_in_list()) {
    return absl::StrCat(name, " before ", ActionToString(list_[next_in_list()]),
                        ": a fixed order runs the schedule's list as it is");
  }
  const std::pair<int, int> key{a.micro_batch, a.chunk};
  switch (kind) {
    case kF:
      if (live_ + 1 > max_live_) {
        return absl::StrCat(name, " would hold ", live_ + 1,
                            " micro-batches' activations; the schedule holds at most ", max_live_);
      }
      if (awaiting_ + 1 > max_awaiting_) {
        return absl::StrCat(name, " would leave ", awaiting_ + 1,
                            " micro-batches awaiting their B; the schedule at most ",
                            max_awaiting_);
      }
      break;
    case kB:
      if (forward_done_.count(key) == 0) {
        return absl::StrCat(name, " before its forward ",
                            ActionToString({ActionType::kForward, a.micro_batch, a.chunk}));
      }
      break;
    case kW:
      if (input_done_.count(key) == 0) {
        return absl::StrCat(name, " before its input-gradient ",
                            ActionToString({ActionType::kBackwardInput, a.micro_batch, a.chunk}));
      }
      break;
  }
  return "";
}

std::vector<Action> ReadyWork::Allowed() const {
  std::vector<int> next;
  for (int k = 0; k < 3; ++k) {
    if (next_[k] < static_cast<int>(by_kind_[k].size())) next.push_back(by_kind_[k][next_[k]]);
  }
  std::sort(next.begin(), next.end());
  std::vector<Action> out;
  for (int i : next) {
    if (Forbidden(list_[i]).empty()) out.push_back(list_[i]);
    if (execution_ == Execution::kFixedOrder) break;
  }
  return out;
}

absl::Status ReadyWork::Ran(const Action& a) {
  if (std::string why = Forbidden(a); !why.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ExecutionName(execution_), " does not allow ", why));
  }
  const Kind kind = KindOf(a.type);
  done_[by_kind_[kind][next_[kind]++]] = true;
  ++ran_;
  const std::pair<int, int> key{a.micro_batch, a.chunk};
  if (a.type == ActionType::kForward) ++live_, ++awaiting_, forward_done_.insert(key);
  if (kind == kB) --awaiting_, input_done_.insert(key);
  if (a.type == ActionType::kBackward || a.type == ActionType::kBackwardWeight) --live_;
  return absl::OkStatus();
}

absl::Status CheckExecutedTrace(const ScheduleSpec& spec, int stage, Execution execution,
                                absl::Span<const Action> trace) {
  if (execution == Execution::kFixedOrder) return CheckTrace(spec, stage, trace);
  absl::StatusOr<std::vector<Action>> list = StageActions(spec, stage);
  if (!list.ok()) return list.status();
  ReadyWork work(*list, execution);
  for (size_t i = 0; i < trace.size(); ++i) {
    if (absl::Status s = work.Ran(trace[i]); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("stage ", stage, " of ", ScheduleName(spec.kind), " (p=", spec.stages,
                       " m=", spec.micro_batches, ") at position ", i, ": ", s.message()));
    }
  }
  if (!work.finished()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", stage, " of ", ScheduleName(spec.kind), ": the trace ends at position ",
        trace.size(), " where ", ActionToString((*list)[work.next_in_list()]), " has not run"));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::pipeline
