// The allowed reorderings (ready_work.h), checked against their definition by oracles written
// here from the rules, not from ReadyWork: any order the executor may choose (any allowed
// action at each point, whatever arrives first) runs every action once, keeps each kind in the
// list's order, respects the dependency DAG within and across stages, and never holds more
// activations than the list does.
#include "plan/ready_work.h"

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include "gtest/gtest.h"
#include "plan/schedule.h"
#include "plan/simulate.h"

namespace dtrain::pipeline {
namespace {

bool IsB(ActionType t) { return t == ActionType::kBackward || t == ActionType::kBackwardInput; }
bool FreesActivations(ActionType t) {
  return t == ActionType::kBackward || t == ActionType::kBackwardWeight;
}
int KindIndex(ActionType t) {
  return t == ActionType::kForward ? 0 : t == ActionType::kBackwardWeight ? 2 : 1;
}

// Peak live (F..W) and awaiting (F..B) of an order.
std::pair<int, int> Peaks(const std::vector<Action>& order) {
  int live = 0, awaiting = 0, peak_live = 0, peak_awaiting = 0;
  for (const Action& a : order) {
    if (a.type == ActionType::kForward) ++live, ++awaiting;
    if (IsB(a.type)) --awaiting;
    if (FreesActivations(a.type)) --live;
    peak_live = std::max(peak_live, live);
    peak_awaiting = std::max(peak_awaiting, awaiting);
  }
  return {peak_live, peak_awaiting};
}

// The rules, checked on one stage's executed order against its list.
void ExpectAllowedReordering(const std::vector<Action>& list, const std::vector<Action>& order,
                             const std::string& where) {
  ASSERT_EQ(order.size(), list.size()) << where;
  for (int kind = 0; kind < 3; ++kind) {  // rule 1: each kind in the list's order
    std::vector<Action> in_list, in_order;
    for (const Action& a : list) {
      if (KindIndex(a.type) == kind) in_list.push_back(a);
    }
    for (const Action& a : order) {
      if (KindIndex(a.type) == kind) in_order.push_back(a);
    }
    EXPECT_EQ(TraceToString(in_order), TraceToString(in_list)) << where << " kind " << kind;
  }
  std::map<std::tuple<int, int, int>, int> at;  // (type, mb, chunk) -> position
  for (size_t i = 0; i < order.size(); ++i) {
    at[{static_cast<int>(order[i].type), order[i].micro_batch, order[i].chunk}] = i;
  }
  for (const Action& a : order) {  // rule 2: B after F, W after B, on this stage
    auto pos = [&](ActionType t) {
      auto it = at.find({static_cast<int>(t), a.micro_batch, a.chunk});
      return it == at.end() ? -1 : it->second;
    };
    const int self = pos(a.type);
    if (IsB(a.type)) {
      EXPECT_LT(pos(ActionType::kForward), self) << where << ActionToString(a);
    }
    if (a.type == ActionType::kBackwardWeight) {
      EXPECT_LT(pos(ActionType::kBackwardInput), self) << where << ActionToString(a);
      EXPECT_GE(pos(ActionType::kBackwardInput), 0) << where << ActionToString(a);
    }
  }
  const auto [list_live, list_awaiting] = Peaks(list);  // rule 3
  const auto [live, awaiting] = Peaks(order);
  EXPECT_LE(live, list_live) << where << ": " << TraceToString(order);
  EXPECT_LE(awaiting, list_awaiting) << where << ": " << TraceToString(order);
}

std::vector<ScheduleSpec> Specs() {
  std::vector<ScheduleSpec> specs;
  for (int p : {1, 2, 3, 4}) {
    for (int m : {1, 2, 3, 4, 8}) {
      specs.push_back({ScheduleKind::kGpipe, p, m, 1});
      specs.push_back({ScheduleKind::kOneFOneB, p, m, 1});
      specs.push_back({ScheduleKind::kZeroBubbleH1, p, m, 1});
      if (p >= 2 && m % p == 0) specs.push_back({ScheduleKind::kInterleaved, p, m, 2});
    }
  }
  return specs;
}

TEST(ReadyWork, AnyAllowedOrderKeepsTheRulesOnEveryStage) {
  std::mt19937 rng(7);
  for (const ScheduleSpec& spec : Specs()) {
    for (int s = 0; s < spec.stages; ++s) {
      const std::vector<Action> list = *StageActions(spec, s);
      for (int trial = 0; trial < 20; ++trial) {
        ReadyWork work(list, Execution::kReadyWork);
        std::vector<Action> order;
        while (!work.finished()) {
          const std::vector<Action> allowed = work.Allowed();
          ASSERT_FALSE(allowed.empty()) << "stage " << s << " stuck on its own rules";
          // The list's next action is always among them, first.
          EXPECT_EQ(allowed.front(), list[work.next_in_list()]);
          const Action a = allowed[rng() % allowed.size()];
          ASSERT_TRUE(work.Ran(a).ok());
          order.push_back(a);
        }
        const std::string where = ScheduleName(spec.kind) + " p=" + std::to_string(spec.stages) +
                                  " m=" + std::to_string(spec.micro_batches) +
                                  " stage=" + std::to_string(s);
        ExpectAllowedReordering(list, order, where);
        EXPECT_TRUE(CheckExecutedTrace(spec, s, Execution::kReadyWork, order).ok()) << where;
      }
    }
  }
}

TEST(ReadyWork, FixedOrderAllowsOnlyTheListsNextAction) {
  const std::vector<Action> list = *StageActions({ScheduleKind::kZeroBubbleH1, 4, 8, 1}, 1);
  ReadyWork work(list, Execution::kFixedOrder);
  for (const Action& a : list) {
    ASSERT_EQ(work.Allowed(), std::vector<Action>{a});
    ASSERT_TRUE(work.Ran(a).ok());
  }
  EXPECT_TRUE(work.finished());
  EXPECT_TRUE(work.Allowed().empty());
}

TEST(ReadyWork, BrokenRulesAreNamed) {
  const ScheduleSpec spec{ScheduleKind::kZeroBubbleH1, 2, 4, 1};
  // Stage 1: F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3.
  const Action F0{ActionType::kForward, 0, 0}, F1{ActionType::kForward, 1, 0},
      F2{ActionType::kForward, 2, 0}, B0{ActionType::kBackwardInput, 0, 0},
      W0{ActionType::kBackwardWeight, 0, 0}, W1{ActionType::kBackwardWeight, 1, 0};
  auto message = [&](std::vector<Action> trace) {
    return std::string(CheckExecutedTrace(spec, 1, Execution::kReadyWork, trace).message());
  };
  EXPECT_NE(message({F1}).find("F1 before F0: F's run in the schedule's order"), std::string::npos)
      << message({F1});
  EXPECT_NE(message({F0, W0}).find("W0 before its input-gradient B0"), std::string::npos);
  EXPECT_NE(message({F0, B0, F1, F2}).find("F2 would hold 3"), std::string::npos)
      << message({F0, B0, F1, F2});
  EXPECT_NE(message({F0, B0, W1}).find("W1 before W0"), std::string::npos);
  EXPECT_NE(message({F0, B0}).find("the trace ends at position 2 where F1 has not run"),
            std::string::npos);
  // Fixed order: the list exactly (CheckTrace).
  EXPECT_FALSE(CheckExecutedTrace(spec, 1, Execution::kFixedOrder, {F0, F1}).ok());
  // Stage 1 holds one micro-batch awaiting its B (p - s), so F1 may not pass B0 there; stage 0
  // (F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3) may run B1 and W1 before F2, then F2 and F3.
  EXPECT_NE(message({F0, F1}).find("F1 would leave 2 micro-batches awaiting their B"),
            std::string::npos);
  const Action B1{ActionType::kBackwardInput, 1, 0}, B2{ActionType::kBackwardInput, 2, 0},
      B3{ActionType::kBackwardInput, 3, 0}, F3{ActionType::kForward, 3, 0},
      W2{ActionType::kBackwardWeight, 2, 0}, W3{ActionType::kBackwardWeight, 3, 0};
  EXPECT_TRUE(CheckExecutedTrace(spec, 0, Execution::kReadyWork,
                                 {F0, F1, B0, W0, B1, W1, F2, F3, B2, W2, B3, W3})
                  .ok());
}

// Across stages: the simulator's ready-work runs, with random costs, finish (no deadlock), keep
// the rules on every stage, and start every action after what it receives.
TEST(ReadyWork, SimulatedRunsWithRandomCostsRespectTheDag) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> cost(0.2, 3.0);
  for (const ScheduleSpec& spec : Specs()) {
    for (int trial = 0; trial < 10; ++trial) {
      std::vector<StageCosts> costs;
      for (int s = 0; s < spec.stages; ++s) costs.push_back({cost(rng), cost(rng), cost(rng)});
      const double latency = trial % 2 ? 0.1 : 0.0;
      absl::StatusOr<SimResult> r = SimulateSchedule(spec, costs, latency, Execution::kReadyWork);
      ASSERT_TRUE(r.ok()) << ScheduleName(spec.kind) << ": " << r.status();
      const int p = spec.stages, v = spec.virtual_stages, K = p * v;
      std::map<std::tuple<int, int, int>, TimedAction> done;  // (type, mb, model chunk)
      for (int s = 0; s < p; ++s) {
        std::vector<Action> order;
        double free = 0;
        for (const TimedAction& t : r->stages[s].timeline) {
          order.push_back(t.action);
          EXPECT_GE(t.start, free - 1e-9);  // one action at a time
          free = t.end;
          done[{static_cast<int>(t.action.type), t.action.micro_batch, t.action.chunk * p + s}] = t;
        }
        ExpectAllowedReordering(*StageActions(spec, s), order, ScheduleName(spec.kind));
      }
      for (const auto& [key, t] : done) {
        const auto [type, mb, k] = key;
        // When what `want` produces is out: a fused backward's input gradient after its B part.
        auto end_of = [&](ActionType want, int chunk) {
          auto it = done.find({static_cast<int>(want), mb, chunk});
          if (it != done.end()) return it->second.end;
          it = done.find({static_cast<int>(ActionType::kBackward), mb, chunk});
          return it->second.start + costs[chunk % p].backward_input;
        };
        if (type == static_cast<int>(ActionType::kForward) && k > 0) {
          EXPECT_GE(t.start, end_of(ActionType::kForward, k - 1) + latency - 1e-9);
        }
        if (IsB(static_cast<ActionType>(type)) && k < K - 1) {
          EXPECT_GE(t.start, end_of(ActionType::kBackwardInput, k + 1) + latency - 1e-9);
        }
      }
    }
  }
}

// With equal costs ZB-H1's list is already the best order within its memory: ready work runs it
// as it is (nothing is early or late). With unequal costs a greedy choice can lose to the list
// (a W that starts just before a B's gradient arrives delays the critical path): p=4 with
// F:B:W = 21:22:15 simulates 0.167 against the fixed order's 0.153, where the executor's gain is
// from absorbing the jitter of real runs instead (docs/PERFORMANCE.md "Pipeline bubble").
TEST(ReadyWork, EqualCostsRunTheListAsItIs) {
  for (int p : {2, 4}) {
    const ScheduleSpec spec{ScheduleKind::kZeroBubbleH1, p, 8, 1};
    const std::vector<StageCosts> costs(p, StageCosts{1, 1, 1});
    const SimResult fixed = *SimulateSchedule(spec, costs, 0, Execution::kFixedOrder);
    const SimResult ready = *SimulateSchedule(spec, costs, 0, Execution::kReadyWork);
    EXPECT_DOUBLE_EQ(ready.bubble_fraction, fixed.bubble_fraction) << "p=" << p;
    for (int s = 0; s < p; ++s) {
      std::vector<Action> order;
      for (const TimedAction& t : ready.stages[s].timeline) order.push_back(t.action);
      EXPECT_EQ(TraceToString(order), TraceToString(*StageActions(spec, s))) << "stage " << s;
    }
  }
}

}  // namespace
}  // namespace dtrain::pipeline
