// The simulator against closed forms: 1F1B and GPipe bubbles (p-1)/(m+p-1), ZB-H1's third of
// it, interleaving's reduction (all with the textbook's fused backward, whose input gradient
// leaves after W), the executor's fused backward (it leaves after B), latency on a two-stage
// pipe by hand, and deadlocks named.
#include "plan/simulate.h"

#include <iostream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::pipeline {
namespace {

using ::testing::HasSubstr;

// Equal stages: F = 1, B = 1, W = 1 per micro-batch through the whole stage; with v chunks,
// each chunk costs 1/v of that.
std::vector<StageCosts> Equal(int p, int v = 1) {
  return std::vector<StageCosts>(p, StageCosts{1.0 / v, 1.0 / v, 1.0 / v});
}

// The literature's closed forms hold for the textbook release (kAfterWeights).
SimResult Simulate(const ScheduleSpec& spec, double latency = 0,
                   GradientRelease release = GradientRelease::kAfterWeights) {
  absl::StatusOr<SimResult> r = SimulateSchedule(spec, Equal(spec.stages, spec.virtual_stages),
                                                 latency, Execution::kFixedOrder, release);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

double OneFOneBTheory(int p, int m) { return (p - 1.0) / (m + p - 1.0); }

TEST(Simulate, OneFOneBAndGpipeBubbleIsTheClosedForm) {
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGpipe}) {
    for (auto [p, m] : {std::pair{1, 4}, {2, 1}, {2, 4}, {4, 4}, {4, 8}, {8, 16}, {8, 3}}) {
      SCOPED_TRACE(absl::StrCat(ScheduleName(kind), " p=", p, " m=", m));
      const SimResult r = Simulate({kind, p, m, 1});
      ASSERT_EQ(r.stages.size(), static_cast<size_t>(p));
      EXPECT_DOUBLE_EQ(r.makespan, 3.0 * (m + p - 1));
      EXPECT_NEAR(r.bubble_fraction, OneFOneBTheory(p, m), 1e-12);
      for (const StageResult& st : r.stages) {
        EXPECT_DOUBLE_EQ(st.busy, 3.0 * m);
        EXPECT_NEAR(st.bubble_fraction, OneFOneBTheory(p, m), 1e-12);
      }
    }
  }
}

TEST(Simulate, PeakLiveGpipeIsMOneFOneBIsPMinusS) {
  const SimResult gpipe = Simulate({ScheduleKind::kGpipe, 4, 8, 1});
  const SimResult one = Simulate({ScheduleKind::kOneFOneB, 4, 8, 1});
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(gpipe.stages[s].peak_live, 8);
    EXPECT_EQ(one.stages[s].peak_live, 4 - s);
    EXPECT_EQ(one.stages[s].peak_awaiting_input_grad, 4 - s);
  }
}

// ZB-H1's bubble per stage is (p-1)(F+B-W) = p-1 instead of 1F1B's 3(p-1): the makespan is
// 3m + p - 1 once m >= p, a third of 1F1B's bubble time.
TEST(Simulate, ZeroBubbleH1CutsTheBubbleToAThird) {
  for (auto [p, m] : {std::pair{2, 4}, {4, 8}, {4, 12}, {8, 16}}) {
    SCOPED_TRACE(absl::StrCat("p=", p, " m=", m));
    const SimResult zb = Simulate({ScheduleKind::kZeroBubbleH1, p, m, 1});
    EXPECT_DOUBLE_EQ(zb.makespan, 3.0 * m + p - 1);
    EXPECT_LT(zb.bubble_fraction, 0.5 * OneFOneBTheory(p, m));
    for (int s = 0; s < p; ++s) {
      EXPECT_LE(zb.stages[s].peak_live, p);
      EXPECT_EQ(zb.stages[s].peak_awaiting_input_grad, p - s);
    }
  }
  // Fewer micro-batches than stages still runs, and still beats 1F1B.
  const SimResult few = Simulate({ScheduleKind::kZeroBubbleH1, 4, 2, 1});
  EXPECT_LT(few.bubble_fraction, OneFOneBTheory(4, 2));
}

// The StageExecutor sends a fused backward's input gradient when its B part is done: the
// previous stage's backward no longer waits for this stage's W, and the bubble of 1F1B and GPipe
// falls from (p-1)(F+B+W) to (p-1)(F+B) per stage. ZB-H1 (no fused backward) keeps its p-1:
// exactly half of that, so at equal costs no ZB-H1 measurement can idle less than half of this
// 1F1B's, and with W cheaper than B ((F+B-W)/(F+B)) it is more than half.
TEST(Simulate, AFusedBackwardReleasingAfterItsInputPartLeavesABubbleOfFPlusB) {
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGpipe}) {
    for (auto [p, m] : {std::pair{1, 4}, {2, 1}, {2, 4}, {2, 8}, {4, 4}, {4, 8}, {8, 16}}) {
      SCOPED_TRACE(absl::StrCat(ScheduleName(kind), " p=", p, " m=", m));
      const SimResult r = Simulate({kind, p, m, 1}, 0, GradientRelease::kAfterInput);
      EXPECT_DOUBLE_EQ(r.makespan, 3.0 * m + 2.0 * (p - 1));
      const SimResult zb =
          Simulate({ScheduleKind::kZeroBubbleH1, p, m, 1}, 0, GradientRelease::kAfterInput);
      if (kind == ScheduleKind::kOneFOneB && m >= p) {
        EXPECT_DOUBLE_EQ(zb.makespan - 3.0 * m, 0.5 * (r.makespan - 3.0 * m));
      }
    }
  }
  // By hand, 2 stages, 1 micro-batch, F = 1, B = 2, W = 3: stage 1's BW0 [2,7] sends at 4;
  // stage 0's BW0 [4,9] (the textbook: [7,12]).
  const std::vector<StageCosts> costs(2, StageCosts{1, 2, 3});
  const ScheduleSpec one{ScheduleKind::kOneFOneB, 2, 1, 1};
  EXPECT_DOUBLE_EQ(SimulateSchedule(one, costs, 0)->makespan, 9);
  EXPECT_DOUBLE_EQ(
      SimulateSchedule(one, costs, 0, Execution::kFixedOrder, GradientRelease::kAfterWeights)
          ->makespan,
      12);
}

// Megatron's interleaving divides the warm-up and cool-down by v: (p-1)/v stage-times of bubble.
TEST(Simulate, InterleavedBeatsOneFOneB) {
  for (auto [p, m, v] : {std::tuple{2, 4, 2}, {4, 8, 2}, {4, 8, 4}, {4, 4, 2}, {8, 16, 2}}) {
    SCOPED_TRACE(absl::StrCat("p=", p, " m=", m, " v=", v));
    const SimResult r = Simulate({ScheduleKind::kInterleaved, p, m, v});
    EXPECT_LT(r.bubble_fraction, OneFOneBTheory(p, m));
    EXPECT_NEAR(r.makespan, 3.0 * m + 3.0 * (p - 1) / v, 1e-9);
  }
}

TEST(Simulate, LatencyByHandOnTwoStages) {
  // F0 on stage 0 [0,1]; stage 1 gets it at 1.5: F0 [1.5,2.5], BW0 [2.5,4.5]; the gradient
  // reaches stage 0 at 5: BW0 [5,7].
  const absl::StatusOr<SimResult> r =
      SimulateSchedule({ScheduleKind::kGpipe, 2, 1, 1}, Equal(2), 0.5, Execution::kFixedOrder,
                       GradientRelease::kAfterWeights);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->makespan, 7);
  ASSERT_EQ(r->stages[0].timeline.size(), 2u);
  EXPECT_DOUBLE_EQ(r->stages[0].timeline[1].start, 5);
  EXPECT_DOUBLE_EQ(r->stages[1].timeline[0].start, 1.5);
  EXPECT_DOUBLE_EQ(r->stages[1].bubble_fraction, 1 - 3.0 / 7);
}

TEST(Simulate, TimelinesAreInOrderWithoutOverlap) {
  const SimResult r = Simulate({ScheduleKind::kInterleaved, 4, 8, 2}, 0.1);
  for (int s = 0; s < 4; ++s) {
    const std::vector<Action> listed = *StageActions({ScheduleKind::kInterleaved, 4, 8, 2}, s);
    ASSERT_EQ(r.stages[s].timeline.size(), listed.size());
    for (size_t i = 0; i < listed.size(); ++i) {
      EXPECT_EQ(r.stages[s].timeline[i].action, listed[i]);
      if (i > 0) {
        EXPECT_GE(r.stages[s].timeline[i].start, r.stages[s].timeline[i - 1].end);
      }
    }
  }
}

// Every built-in schedule runs to the end on any shape, with unequal stages and latency.
TEST(Simulate, EveryBuiltInScheduleRunsWithoutDeadlock) {
  for (int p = 1; p <= 8; ++p) {
    std::vector<StageCosts> costs;
    for (int s = 0; s < p; ++s) costs.push_back({1.0 + 0.3 * s, 1.5, 0.5 + 0.1 * (p - s)});
    for (int m = 1; m <= 12; ++m) {
      std::vector<ScheduleSpec> specs = {{ScheduleKind::kGpipe, p, m, 1},
                                         {ScheduleKind::kOneFOneB, p, m, 1},
                                         {ScheduleKind::kZeroBubbleH1, p, m, 1}};
      if (p >= 2 && m % p == 0) {
        for (int v = 2; v <= 3; ++v) specs.push_back({ScheduleKind::kInterleaved, p, m, v});
      }
      for (const ScheduleSpec& spec : specs) {
        const absl::StatusOr<SimResult> r = SimulateSchedule(spec, costs, 0.3);
        EXPECT_TRUE(r.ok()) << ScheduleName(spec.kind) << " p=" << p << " m=" << m
                            << " v=" << spec.virtual_stages << ": " << r.status();
      }
    }
  }
}

// A cycle: stage 0 wants micro-batch 0's gradient before it forwards micro-batch 1, while
// stage 1 wants micro-batch 1's activation before it forwards micro-batch 0.
TEST(Simulate, DeadlockNamesEveryBlockedStage) {
  const Action f0{ActionType::kForward, 0, 0}, f1{ActionType::kForward, 1, 0};
  const Action b0{ActionType::kBackward, 0, 0}, b1{ActionType::kBackward, 1, 0};
  const absl::StatusOr<SimResult> r =
      SimulateActions({{f0, b0, f1, b1}, {f1, f0, b0, b1}}, 2, 1, Equal(2), 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "deadlock: stage 0 waits at BW0 for the input gradient of micro-batch 0 from stage 1; "
            "stage 1 waits at F1 for the activation of micro-batch 1 from stage 0");
}

TEST(Simulate, DeadlockOnAMissingOrMisorderedPass) {
  const Action f0{ActionType::kForward, 0, 0};
  const Action b0{ActionType::kBackwardInput, 0, 0}, w0{ActionType::kBackwardWeight, 0, 0};
  // Stage 1 never sends micro-batch 0's input gradient.
  absl::StatusOr<SimResult> r = SimulateActions({{f0, b0, w0}, {f0, w0}}, 1, 1, Equal(2), 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(),
              HasSubstr("stage 0 waits at B0 for the input gradient of micro-batch 0 from stage "
                        "1, which stage 1 never runs; stage 1 waits at W0 for its own B0, which "
                        "is not in its list"));
  // W before its own B on one stage.
  r = SimulateActions({{f0, w0, b0}}, 1, 1, Equal(1), 0);
  EXPECT_THAT(r.status().message(),
              HasSubstr("stage 0 waits at W0 for its own B0, which comes later in its list"));
  // Interleaved chunks name the model chunk.
  const Action f01{ActionType::kForward, 0, 1};
  r = SimulateActions({{f0, f01}, {}}, 1, 2, Equal(2, 2), 0);
  EXPECT_THAT(r.status().message(),
              HasSubstr("stage 0 waits at F0.1 for the activation of micro-batch 0 (model chunk "
                        "1) from stage 1, which stage 1 never runs"));
}

TEST(Simulate, RejectsMalformedInput) {
  const Action f0{ActionType::kForward, 0, 0}, f5{ActionType::kForward, 5, 0};
  EXPECT_EQ(SimulateActions({{f0, f0}}, 1, 1, Equal(1), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(SimulateActions({{f5}}, 2, 1, Equal(1), 0).status().message(),
              HasSubstr("stage 0: F5 is outside micro-batches 0..1"));
  EXPECT_THAT(SimulateActions({{f0}}, 1, 1, Equal(2), 0).status().message(),
              HasSubstr("costs has 2 entries for 1 stages"));
  EXPECT_EQ(SimulateSchedule({ScheduleKind::kInterleaved, 4, 6, 2}, Equal(4), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The numbers quoted in docs: p=4, m=8, F=B=W=1 per stage, no latency.
TEST(Simulate, ReportsBubblesForFourStagesEightMicroBatches) {
  for (auto [kind, v] : {std::pair{ScheduleKind::kGpipe, 1},
                         {ScheduleKind::kOneFOneB, 1},
                         {ScheduleKind::kInterleaved, 2},
                         {ScheduleKind::kZeroBubbleH1, 1}}) {
    const SimResult r = Simulate({kind, 4, 8, v});
    std::cout << ScheduleName(kind) << " v=" << v << ": makespan " << r.makespan << " bubble "
              << r.bubble_fraction << "\n";
  }
}

}  // namespace
}  // namespace dtrain::pipeline
