// The schedules as specifications: completeness and order for every kind over several shapes,
// the warm-up depths and peak memory each schedule promises, Megatron's interleaved order by
// hand, and CheckTrace naming the rule a bad trace breaks.
#include "plan/schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::pipeline {
namespace {

using ::testing::HasSubstr;

std::vector<Action> Actions(const ScheduleSpec& spec, int stage) {
  absl::StatusOr<std::vector<Action>> a = StageActions(spec, stage);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *a : std::vector<Action>{};
}

// Micro-batch-chunks live (F done, backward not finished: W or fused BW) at the worst moment.
int PeakLive(const std::vector<Action>& actions, bool until_input_grad = false) {
  int live = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.type == ActionType::kForward) ++live;
    if (a.type == ActionType::kBackward) --live;
    if (a.type == (until_input_grad ? ActionType::kBackwardInput : ActionType::kBackwardWeight)) {
      --live;
    }
    peak = std::max(peak, live);
  }
  return peak;
}

int ForwardsBeforeFirstBackward(const std::vector<Action>& actions) {
  int n = 0;
  while (n < static_cast<int>(actions.size()) && actions[n].type == ActionType::kForward) ++n;
  return n;
}

std::vector<ScheduleSpec> Shapes() {
  std::vector<ScheduleSpec> specs;
  for (ScheduleKind kind :
       {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1}) {
    for (auto [p, m] : {std::pair{1, 1}, {1, 4}, {2, 1}, {2, 5}, {4, 2}, {4, 4}, {4, 8}, {8, 3}}) {
      specs.push_back({kind, p, m, 1});
    }
  }
  for (auto [p, m, v] :
       {std::tuple{2, 2, 2}, {2, 4, 2}, {4, 4, 2}, {4, 8, 2}, {4, 8, 3}, {3, 9, 4}, {8, 16, 2}}) {
    specs.push_back({ScheduleKind::kInterleaved, p, m, v});
  }
  return specs;
}

std::string Name(const ScheduleSpec& s) {
  return absl::StrCat(ScheduleName(s.kind), " p=", s.stages, " m=", s.micro_batches,
                      " v=", s.virtual_stages);
}

TEST(ScheduleNames, RoundTripAndRejectUnknown) {
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
    absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(name);
    ASSERT_TRUE(kind.ok()) << name;
    EXPECT_EQ(ScheduleName(*kind), name);
  }
  absl::StatusOr<ScheduleKind> bad = ParseScheduleKind("zb-h2");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("gpipe, 1f1b, interleaved, zb-h1"));
}

TEST(ValidateSchedule, NamesTheFieldAndTheRule) {
  EXPECT_TRUE(ValidateSchedule({ScheduleKind::kOneFOneB, 4, 8, 1}).ok());
  EXPECT_TRUE(ValidateSchedule({ScheduleKind::kInterleaved, 4, 8, 2}).ok());
  struct Case {
    ScheduleSpec spec;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{ScheduleKind::kOneFOneB, 0, 8, 1}, "stages (0) must be >= 1"},
           {{ScheduleKind::kGpipe, 2, 0, 1}, "micro_batches (0) must be >= 1"},
           {{ScheduleKind::kZeroBubbleH1, 2, 4, 2}, "virtual_stages (2) must be 1 for zb-h1"},
           {{ScheduleKind::kInterleaved, 4, 8, 1}, "interleaved needs virtual_stages (1) >= 2"},
           {{ScheduleKind::kInterleaved, 1, 8, 2}, "interleaved needs stages (1) >= 2"},
           {{ScheduleKind::kInterleaved, 4, 6, 2},
            "interleaved needs micro_batches (6) to be a multiple of stages (4)"},
       }) {
    const absl::Status status = ValidateSchedule(c.spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << Name(c.spec);
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
  EXPECT_EQ(StageActions({ScheduleKind::kOneFOneB, 4, 8, 1}, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Every (micro-batch, chunk) gets one F and one backward (fused, or B then W), in that order.
TEST(StageActions, EveryPassExactlyOnceAndInOrder) {
  for (const ScheduleSpec& spec : Shapes()) {
    const bool split = spec.kind == ScheduleKind::kZeroBubbleH1;
    for (int s = 0; s < spec.stages; ++s) {
      SCOPED_TRACE(absl::StrCat(Name(spec), " stage ", s));
      const std::vector<Action> actions = Actions(spec, s);
      EXPECT_EQ(actions.size(),
                static_cast<size_t>(spec.micro_batches * spec.virtual_stages * (split ? 3 : 2)));
      std::map<std::tuple<int, int, ActionType>, int> position;
      for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
        const Action& a = actions[i];
        EXPECT_TRUE(position.emplace(std::tuple{a.micro_batch, a.chunk, a.type}, i).second)
            << ActionToString(a) << " repeated";
        EXPECT_EQ(a.type == ActionType::kBackward, !split && a.type != ActionType::kForward);
      }
      for (int mb = 0; mb < spec.micro_batches; ++mb) {
        for (int c = 0; c < spec.virtual_stages; ++c) {
          auto at = [&](ActionType t) {
            auto it = position.find({mb, c, t});
            return it == position.end() ? -1 : it->second;
          };
          const int f = at(ActionType::kForward);
          ASSERT_GE(f, 0) << "F" << mb << "." << c << " missing";
          if (split) {
            EXPECT_LT(f, at(ActionType::kBackwardInput)) << "B" << mb;
            EXPECT_LT(at(ActionType::kBackwardInput), at(ActionType::kBackwardWeight)) << "W" << mb;
          } else {
            EXPECT_LT(f, at(ActionType::kBackward)) << "BW" << mb;
          }
        }
      }
    }
  }
}

TEST(Gpipe, AllForwardsThenAllBackwardsPeakIsM) {
  EXPECT_EQ(TraceToString(Actions({ScheduleKind::kGpipe, 4, 3, 1}, 2)), "F0 F1 F2 BW0 BW1 BW2");
  for (int m : {1, 3, 8}) EXPECT_EQ(PeakLive(Actions({ScheduleKind::kGpipe, 4, m, 1}, 0)), m);
}

// 1F1B: min(p-s-1, m) warm-up forwards, then the first steady F before the first backward,
// so min(p-s, m) forwards before it, which is also the peak (stage 0: min(p, m)).
TEST(OneFOneB, WarmupDepthAndPeak) {
  EXPECT_EQ(TraceToString(Actions({ScheduleKind::kOneFOneB, 4, 8, 1}, 0)),
            "F0 F1 F2 F3 BW0 F4 BW1 F5 BW2 F6 BW3 F7 BW4 BW5 BW6 BW7");
  EXPECT_EQ(TraceToString(Actions({ScheduleKind::kOneFOneB, 4, 8, 1}, 3)),
            "F0 BW0 F1 BW1 F2 BW2 F3 BW3 F4 BW4 F5 BW5 F6 BW6 F7 BW7");
  for (auto [p, m] : {std::pair{4, 8}, {4, 2}, {4, 3}, {8, 3}, {2, 1}, {1, 5}}) {
    for (int s = 0; s < p; ++s) {
      SCOPED_TRACE(absl::StrCat("p=", p, " m=", m, " s=", s));
      const std::vector<Action> actions = Actions({ScheduleKind::kOneFOneB, p, m, 1}, s);
      const int warmup = std::min(p - s - 1, m);
      EXPECT_EQ(ForwardsBeforeFirstBackward(actions), warmup < m ? warmup + 1 : m);
      EXPECT_EQ(PeakLive(actions), std::min(p - s, m));
    }
  }
}

// Hand-derived from Megatron's rule for p=2, m=4, v=2 (8 virtual micro-batches k):
//   forward k:  chunk (k/2)%2, mb (k/4)*2 + k%2 -> F0 F1 F0.1 F1.1 F2 F3 F2.1 F3.1
//   backward k: chunk 1-(k/2)%2, same mb      -> BW0.1 BW1.1 BW0 BW1 BW2.1 BW3.1 BW2 BW3
//   warm-up: stage 0 (2-0-1)*2 + 1*2 = 4, stage 1 0 + 2 = 2; then forward w+i / backward i
//   pairs, then the remaining backwards. (Chunk 0 prints without ".0".)
TEST(Interleaved, MatchesMegatronByHand) {
  const ScheduleSpec spec{ScheduleKind::kInterleaved, 2, 4, 2};
  EXPECT_EQ(TraceToString(Actions(spec, 0)),
            "F0 F1 F0.1 F1.1 F2 BW0.1 F3 BW1.1 F2.1 BW0 F3.1 BW1 BW2.1 BW3.1 BW2 BW3");
  EXPECT_EQ(TraceToString(Actions(spec, 1)),
            "F0 F1 F0.1 BW0.1 F1.1 BW1.1 F2 BW0 F3 BW1 F2.1 BW2.1 F3.1 BW3.1 BW2 BW3");
}

TEST(Interleaved, WarmupCappedAtAllVirtualMicroBatches) {
  // p=4, v=3, m=4: stage 0 wants 3*2 + 2*4 = 14 > 12 warm-up forwards: all forwards first.
  const std::vector<Action> actions = Actions({ScheduleKind::kInterleaved, 4, 4, 3}, 0);
  EXPECT_EQ(ForwardsBeforeFirstBackward(actions), 12);
}

// ZB-H1: p-s warm-up forwards, s W's deferred to the cool-down. Live until W, every stage
// peaks at min(p, m) (1F1B's stage-0 peak); live until B, stage s peaks at min(p-s, m) (1F1B's).
TEST(ZeroBubbleH1, OrderAndMemory) {
  EXPECT_EQ(TraceToString(Actions({ScheduleKind::kZeroBubbleH1, 4, 6, 1}, 0)),
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5");
  EXPECT_EQ(TraceToString(Actions({ScheduleKind::kZeroBubbleH1, 4, 6, 1}, 3)),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5");
  for (auto [p, m] : {std::pair{4, 8}, {4, 4}, {4, 2}, {8, 3}, {2, 5}, {1, 3}}) {
    for (int s = 0; s < p; ++s) {
      SCOPED_TRACE(absl::StrCat("p=", p, " m=", m, " s=", s));
      const std::vector<Action> actions = Actions({ScheduleKind::kZeroBubbleH1, p, m, 1}, s);
      EXPECT_EQ(ForwardsBeforeFirstBackward(actions), std::min(p - s, m));
      EXPECT_LE(PeakLive(actions), std::min(p, m));
      EXPECT_EQ(PeakLive(actions, /*until_input_grad=*/true), std::min(p - s, m));
    }
  }
}

TEST(CheckTrace, AcceptsTheScheduleItself) {
  for (const ScheduleSpec& spec : Shapes()) {
    for (int s = 0; s < spec.stages; ++s) {
      EXPECT_TRUE(CheckTrace(spec, s, Actions(spec, s)).ok()) << Name(spec) << " stage " << s;
    }
  }
}

TEST(CheckTrace, SwappedPairNamesPositionBothActionsAndRule) {
  const ScheduleSpec spec{ScheduleKind::kOneFOneB, 4, 8, 1};
  std::vector<Action> trace = Actions(spec, 2);  // F0 F1 BW0 F2 BW1 ...
  std::swap(trace[1], trace[2]);                 // F0 BW0 F1 ...: the warm-up cut short
  const absl::Status status = CheckTrace(spec, 2, trace);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("stage 2 of 1f1b (p=4 m=8) differs at position 1: "
                                          "expected F1, got BW0"));
  EXPECT_THAT(status.message(), HasSubstr("warm-up depth: 1 forwards before the first backward, "
                                          "expected 2"));

  std::vector<Action> b_first = Actions(spec, 3);  // F0 BW0 F1 BW1 ...
  std::swap(b_first[2], b_first[3]);               // F0 BW0 BW1 F1
  EXPECT_THAT(CheckTrace(spec, 3, b_first).message(),
              HasSubstr("broken rule: BW1 runs before its forward F1"));
}

TEST(CheckTrace, MissingWRepeatedAndWBeforeB) {
  const ScheduleSpec spec{ScheduleKind::kZeroBubbleH1, 4, 6, 1};
  const std::vector<Action> good = Actions(spec, 0);  // F0 F1 F2 F3 B0 W0 F4 ...
  std::vector<Action> missing = good;
  missing.erase(missing.begin() + 5);  // W0
  absl::Status status = CheckTrace(spec, 0, missing);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("position 5: expected W0, got F4"));
  EXPECT_THAT(status.message(), HasSubstr("broken rule: W0 is missing"));

  std::vector<Action> truncated(good.begin(), good.end() - 1);
  EXPECT_THAT(CheckTrace(spec, 0, truncated).message(),
              HasSubstr("the trace ends at position 17 where W5 is expected; broken rule: W5 is "
                        "missing"));

  std::vector<Action> repeated = good;
  repeated.push_back(good.back());
  EXPECT_THAT(CheckTrace(spec, 0, repeated).message(),
              HasSubstr("the schedule has ended but the trace has W5; broken rule: W5 is "
                        "repeated (position 18)"));

  std::vector<Action> w_first = good;
  std::swap(w_first[4], w_first[5]);  // W0 B0
  EXPECT_THAT(CheckTrace(spec, 0, w_first).message(),
              HasSubstr("broken rule: W0 runs before its input-gradient B0"));

  std::vector<Action> fused = Actions({ScheduleKind::kOneFOneB, 4, 6, 1}, 0);
  EXPECT_THAT(CheckTrace(spec, 0, fused).message(),
              HasSubstr("BW0 is not part of the schedule zb-h1"));
}

}  // namespace
}  // namespace dtrain::pipeline
