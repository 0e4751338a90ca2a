#include "plan/simulate.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrain::pipeline {
namespace {

bool ProducesInputGrad(ActionType t) {
  return t == ActionType::kBackward || t == ActionType::kBackwardInput;
}
bool FreesActivations(ActionType t) {
  return t == ActionType::kBackward || t == ActionType::kBackwardWeight;
}

// End times of what has run so far, per (micro-batch, model chunk); nullopt: not yet.
struct Done {
  std::optional<double> forward;     // F
  std::optional<double> input_grad;  // B or fused BW: the gradient sent to chunk k-1
  std::optional<double> weight;      // W or fused BW
};

class Simulator {
 public:
  Simulator(const std::vector<std::vector<Action>>& lists, int m, int v,
            absl::Span<const StageCosts> costs, double latency, GradientRelease release)
      : lists_(lists),
        p_(static_cast<int>(lists.size())),
        m_(m),
        v_(v),
        costs_(costs),
        latency_(latency),
        release_(release) {}

  absl::Status Validate() const {
    if (p_ < 1) return absl::InvalidArgumentError("no stages: stage_actions is empty");
    if (m_ < 1 || v_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("micro_batches (", m_, ") and virtual_stages (", v_, ") must be >= 1"));
    }
    if (static_cast<int>(costs_.size()) != p_) {
      return absl::InvalidArgumentError(
          absl::StrCat("costs has ", costs_.size(), " entries for ", p_, " stages"));
    }
    if (latency_ < 0) return absl::InvalidArgumentError(absl::StrCat("latency ", latency_, " < 0"));
    for (int s = 0; s < p_; ++s) {
      const StageCosts& c = costs_[s];
      if (c.forward < 0 || c.backward_input < 0 || c.backward_weight < 0) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", s, " has a negative cost"));
      }
      // Per (mb, chunk): at most one F, one input-gradient producer, one activation freer.
      std::vector<int> f(m_ * v_), b(m_ * v_), w(m_ * v_);
      for (const Action& a : lists_[s]) {
        if (a.micro_batch < 0 || a.micro_batch >= m_ || a.chunk < 0 || a.chunk >= v_) {
          return absl::InvalidArgumentError(absl::StrCat("stage ", s, ": ", ActionToString(a),
                                                         " is outside micro-batches 0..", m_ - 1,
                                                         ", chunks 0..", v_ - 1));
        }
        const int i = a.micro_batch * v_ + a.chunk;
        const bool repeated = (a.type == ActionType::kForward && ++f[i] > 1) ||
                              (ProducesInputGrad(a.type) && ++b[i] > 1) ||
                              (FreesActivations(a.type) && ++w[i] > 1);
        if (repeated) {
          return absl::InvalidArgumentError(
              absl::StrCat("stage ", s, ": ", ActionToString(a), " repeats a pass already listed"));
        }
      }
    }
    return absl::OkStatus();
  }

  // Ready work: the stage that can start an action soonest starts it (an input not produced yet
  // comes from an action that starts no earlier, so nothing it enables could start before).
  absl::StatusOr<SimResult> RunReadyWork() {
    done_.assign(static_cast<size_t>(m_) * p_ * v_, Done{});
    std::vector<ReadyWork> work;
    for (const auto& list : lists_) work.emplace_back(list, Execution::kReadyWork);
    std::vector<double> free_at(p_, 0);
    SimResult result;
    result.stages.resize(p_);
    while (true) {
      int best_stage = -1;
      Action best;
      double best_start = 0;
      bool any_left = false;
      for (int s = 0; s < p_; ++s) {
        if (work[s].finished()) continue;
        any_left = true;
        for (const Action& a : work[s].Allowed()) {  // the list's order: first wins a tie
          const std::optional<double> ready = ReadyTime(a, s);
          if (!ready.has_value()) continue;
          const double start = std::max(free_at[s], *ready);
          if (best_stage < 0 || start < best_start) best_stage = s, best = a, best_start = start;
        }
      }
      if (!any_left) break;
      if (best_stage < 0) {
        std::vector<size_t> next(p_);
        for (int s = 0; s < p_; ++s) next[s] = work[s].next_in_list();
        return absl::FailedPreconditionError(DeadlockReport(next));
      }
      const double end = best_start + Cost(best.type, best_stage);
      if (absl::Status ran = work[best_stage].Ran(best); !ran.ok()) return ran;
      Record(best, best_stage, best_start, end);
      result.stages[best_stage].timeline.push_back({best, best_start, end});
      free_at[best_stage] = end;
    }
    Summarize(result);
    return result;
  }

  absl::StatusOr<SimResult> Run() {
    done_.assign(static_cast<size_t>(m_) * p_ * v_, Done{});
    std::vector<size_t> next(p_, 0);
    std::vector<double> free_at(p_, 0);
    SimResult result;
    result.stages.resize(p_);
    size_t remaining = 0;
    for (const auto& list : lists_) remaining += list.size();
    while (remaining > 0) {
      bool progress = false;
      for (int s = 0; s < p_; ++s) {
        // Run stage s as far as its inputs allow; times do not depend on the visiting order.
        while (next[s] < lists_[s].size()) {
          const Action& a = lists_[s][next[s]];
          const std::optional<double> ready = ReadyTime(a, s);
          if (!ready.has_value()) break;
          const double start = std::max(free_at[s], *ready);
          const double end = start + Cost(a.type, s);
          Record(a, s, start, end);
          result.stages[s].timeline.push_back({a, start, end});
          free_at[s] = end;
          ++next[s];
          --remaining;
          progress = true;
        }
      }
      if (!progress) return absl::FailedPreconditionError(DeadlockReport(next));
    }
    Summarize(result);
    return result;
  }

 private:
  int ChunkOf(const Action& a, int stage) const { return a.chunk * p_ + stage; }
  int StageOf(int model_chunk) const { return model_chunk % p_; }
  Done& At(int mb, int model_chunk) {
    return done_[static_cast<size_t>(mb) * p_ * v_ + model_chunk];
  }
  double Hop(int from, int to) const { return from == to ? 0.0 : latency_; }

  double Cost(ActionType t, int s) const {
    const StageCosts& c = costs_[s];
    switch (t) {
      case ActionType::kForward:
        return c.forward;
      case ActionType::kBackward:
        return c.backward_input + c.backward_weight;
      case ActionType::kBackwardInput:
        return c.backward_input;
      case ActionType::kBackwardWeight:
        return c.backward_weight;
    }
    return 0;
  }

  // When `a`'s inputs are available on stage s; nullopt while one has not been produced.
  std::optional<double> ReadyTime(const Action& a, int s) {
    const int k = ChunkOf(a, s), mb = a.micro_batch;
    if (a.type == ActionType::kForward) {
      if (k == 0) return 0.0;
      const std::optional<double> prev = At(mb, k - 1).forward;
      if (!prev.has_value()) return std::nullopt;
      return *prev + Hop(StageOf(k - 1), s);
    }
    if (a.type == ActionType::kBackwardWeight) return At(mb, k).input_grad;
    const std::optional<double> own = At(mb, k).forward;
    if (!own.has_value()) return std::nullopt;
    if (k == p_ * v_ - 1) return *own;  // the last chunk computes the loss itself
    const std::optional<double> grad = At(mb, k + 1).input_grad;
    if (!grad.has_value()) return std::nullopt;
    return std::max(*own, *grad + Hop(StageOf(k + 1), s));
  }

  void Record(const Action& a, int s, double start, double end) {
    Done& d = At(a.micro_batch, ChunkOf(a, s));
    if (a.type == ActionType::kForward) d.forward = end;
    if (a.type == ActionType::kBackwardInput) d.input_grad = end;
    if (a.type == ActionType::kBackward) {  // its B part runs first
      d.input_grad =
          release_ == GradientRelease::kAfterInput ? start + costs_[s].backward_input : end;
    }
    if (FreesActivations(a.type)) d.weight = end;
  }

  // Whether stage s's list holds `a` at or after position `from`.
  bool Lists(int s, const Action& a, size_t from) const {
    return std::find(lists_[s].begin() + std::min(from, lists_[s].size()), lists_[s].end(), a) !=
           lists_[s].end();
  }

  // "which stage 1 never runs" / "" when the producer still has it to run.
  std::string Producer(int s, const Action& a, size_t from) const {
    if (Lists(s, a, from)) return "";
    return absl::StrCat(", which stage ", s, " never runs");
  }

  std::string MicroBatch(int mb, int model_chunk) const {
    if (v_ == 1) return absl::StrCat("micro-batch ", mb);
    return absl::StrCat("micro-batch ", mb, " (model chunk ", model_chunk, ")");
  }

  // What blocked stage s waits for at its next action.
  std::string Wait(int s, const std::vector<size_t>& next) {
    const Action& a = lists_[s][next[s]];
    const int k = ChunkOf(a, s), mb = a.micro_batch;
    const std::string at = absl::StrCat("stage ", s, " waits at ", ActionToString(a), " for ");
    auto own = [&](ActionType type) {
      const Action need{type, mb, a.chunk};
      return absl::StrCat(at, "its own ", ActionToString(need),
                          Lists(s, need, next[s]) ? ", which comes later in its list"
                                                  : ", which is not in its list");
    };
    if (a.type == ActionType::kForward) {
      const int from = StageOf(k - 1);
      const Action need{ActionType::kForward, mb, (k - 1) / p_};
      if (from == s) return own(ActionType::kForward);
      return absl::StrCat(at, "the activation of ", MicroBatch(mb, k - 1), " from stage ", from,
                          Producer(from, need, next[from]));
    }
    if (a.type == ActionType::kBackwardWeight) {
      const Action fused{ActionType::kBackward, mb, a.chunk};
      return own(Lists(s, fused, 0) ? ActionType::kBackward : ActionType::kBackwardInput);
    }
    if (!At(mb, k).forward.has_value()) return own(ActionType::kForward);
    const int from = StageOf(k + 1);
    const int chunk = (k + 1) / p_;
    const bool producer_lists = Lists(from, {ActionType::kBackward, mb, chunk}, next[from]) ||
                                Lists(from, {ActionType::kBackwardInput, mb, chunk}, next[from]);
    return absl::StrCat(at, "the input gradient of ", MicroBatch(mb, k + 1), " from stage ", from,
                        producer_lists ? "" : absl::StrCat(", which stage ", from, " never runs"));
  }

  std::string DeadlockReport(const std::vector<size_t>& next) {
    std::vector<std::string> waits;
    for (int s = 0; s < p_; ++s) {
      if (next[s] < lists_[s].size()) waits.push_back(Wait(s, next));
    }
    return absl::StrCat("deadlock: ", absl::StrJoin(waits, "; "));
  }

  void Summarize(SimResult& result) const {
    double total_busy = 0;
    for (const StageResult& st : result.stages) {
      for (const TimedAction& t : st.timeline) result.makespan = std::max(result.makespan, t.end);
    }
    for (StageResult& st : result.stages) {
      int live = 0, awaiting = 0;
      for (const TimedAction& t : st.timeline) {
        st.busy += t.end - t.start;
        if (t.action.type == ActionType::kForward) ++live, ++awaiting;
        if (ProducesInputGrad(t.action.type)) --awaiting;
        if (FreesActivations(t.action.type)) --live;
        st.peak_live = std::max(st.peak_live, live);
        st.peak_awaiting_input_grad = std::max(st.peak_awaiting_input_grad, awaiting);
      }
      st.bubble_fraction = result.makespan > 0 ? 1.0 - st.busy / result.makespan : 0.0;
      total_busy += st.busy;
    }
    result.bubble_fraction = result.makespan > 0 ? 1.0 - total_busy / (p_ * result.makespan) : 0.0;
  }

  const std::vector<std::vector<Action>>& lists_;
  const int p_, m_, v_;
  absl::Span<const StageCosts> costs_;
  const double latency_;
  const GradientRelease release_;
  std::vector<Done> done_;  // [mb * p * v + model chunk], sized by Run
};

}  // namespace

absl::StatusOr<SimResult> SimulateActions(const std::vector<std::vector<Action>>& stage_actions,
                                          int micro_batches, int virtual_stages,
                                          absl::Span<const StageCosts> costs, double latency,
                                          Execution execution, GradientRelease release) {
  Simulator sim(stage_actions, micro_batches, virtual_stages, costs, latency, release);
  if (absl::Status valid = sim.Validate(); !valid.ok()) return valid;
  return execution == Execution::kReadyWork ? sim.RunReadyWork() : sim.Run();
}

absl::StatusOr<SimResult> SimulateSchedule(const ScheduleSpec& spec,
                                           absl::Span<const StageCosts> costs, double latency,
                                           Execution execution, GradientRelease release) {
  if (absl::Status valid = ValidateSchedule(spec); !valid.ok()) return valid;
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < spec.stages; ++s) {
    absl::StatusOr<std::vector<Action>> actions = StageActions(spec, s);
    if (!actions.ok()) return actions.status();
    lists.push_back(*std::move(actions));
  }
  return SimulateActions(lists, spec.micro_batches, spec.virtual_stages, costs, latency, execution,
                         release);
}

}  // namespace dtrain::pipeline
