// The schedules, one generator each. With p stages, m micro-batches, v chunks per stage and
// stage s (0-based):
//
// GPipe: F0 .. F(m-1), then BW0 .. BW(m-1).
//
// 1F1B (PipeDream-flush): w = min(p-s-1, m) warm-up forwards F0 .. F(w-1); then m-w steady
// pairs F(w+i) BW(i); then the cool-down BW(m-w) .. BW(m-1). Stage s holds at most
// min(p-s, m) micro-batches' activations.
//
// Interleaved 1F1B (Megatron-LM's forward_backward_pipelining_with_interleaving): the m*v
// (micro-batch, chunk) pairs are "virtual micro-batches" k = 0 .. m*v-1, taken in groups of p
// micro-batches that go through every chunk before the next group starts:
//   forward  k: chunk (k / p) % v,         micro-batch (k / (p*v)) * p + k % p
//   backward k: chunk v-1 - (k / p) % v,   same micro-batch
// Stage s runs w = min((p-s-1)*2 + (v-1)*p, m*v) warm-up forwards, then m*v-w steady pairs
// (forward w+i, backward i), then the remaining backwards.
//
// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", the handcrafted ZB-H1; the order is
// that of PaddlePaddle's pipeline_scheduler_ZBH1 pass, extended to m < p):
//   warm-up   w = min(p-s, m) forwards F0 .. F(w-1)                 (one more than 1F1B)
//   B0
//   up to s   pairs F B, no W                                      (stage s defers s W's)
//   W0
//   steady    triples F B W while forwards remain
//   cool-down pairs B W while input-gradients remain
//   the s deferred W's
// B is on the critical path (the stage before waits for it), W is not: stage s starts s
// forward-times after stage 0, and the W's it defers at the start are the ones that fill the
// end of its timeline, where 1F1B leaves the cool-down bubble. With F = B = W the bubble falls
// from 1F1B's (p-1)(F+B+W) to (p-1)(F+B-W) per stage, a third.
//
// Memory: counting a micro-batch live from its F to its W, every ZB-H1 stage peaks at min(p, m)
// micro-batches: the same peak as 1F1B's stage 0 (the largest), not the p-s of 1F1B's stage s.
// Counting only F-to-B (the activations B reads; W keeps only the layer inputs and output
// gradients, a small part), stage s peaks at min(p-s, m), exactly as in 1F1B.
// Why not at most p-s live F-to-W on stage s: the last stage could then hold one micro-batch and
// must run F B W F B W with nothing deferred, so with F = B = W = 1 its last B ends at 3m+p-2 and
// stage 0's last W at >= 3m+2p-2: for p=4, m=8 a bubble of at least 6/30 = 20% against 1F1B's
// 27.3%, where ZB-H1 as published reaches 3/27 = 11.1%.
#include "plan/schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrain::pipeline {
namespace {

Action F(int mb, int chunk = 0) { return {ActionType::kForward, mb, chunk}; }
Action BW(int mb, int chunk = 0) { return {ActionType::kBackward, mb, chunk}; }
Action B(int mb) { return {ActionType::kBackwardInput, mb, 0}; }
Action W(int mb) { return {ActionType::kBackwardWeight, mb, 0}; }

std::vector<Action> Gpipe(int m) {
  std::vector<Action> out;
  for (int i = 0; i < m; ++i) out.push_back(F(i));
  for (int i = 0; i < m; ++i) out.push_back(BW(i));
  return out;
}

std::vector<Action> OneFOneB(int p, int m, int s) {
  const int warmup = std::min(p - s - 1, m);
  std::vector<Action> out;
  for (int i = 0; i < warmup; ++i) out.push_back(F(i));
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back(F(warmup + i));
    out.push_back(BW(i));
  }
  for (int i = m - warmup; i < m; ++i) out.push_back(BW(i));
  return out;
}

std::vector<Action> Interleaved(int p, int m, int v, int s) {
  const int total = m * v;
  const int warmup = std::min((p - s - 1) * 2 + (v - 1) * p, total);
  auto mb = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto forward = [&](int k) { return F(mb(k), (k / p) % v); };
  auto backward = [&](int k) { return BW(mb(k), v - 1 - (k / p) % v); };
  std::vector<Action> out;
  for (int k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(forward(warmup + i));
    out.push_back(backward(i));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(backward(k));
  return out;
}

std::vector<Action> ZeroBubbleH1(int p, int m, int s) {
  int f = 0, b = 0, w = 0;  // next F, B, W
  std::vector<Action> out;
  for (; f < std::min(p - s, m); ++f) out.push_back(F(f));
  out.push_back(B(b++));
  for (int i = 0; i < s && f < m; ++i) {
    out.push_back(F(f++));
    out.push_back(B(b++));
  }
  out.push_back(W(w++));
  while (f < m) {
    out.push_back(F(f++));
    out.push_back(B(b++));
    out.push_back(W(w++));
  }
  while (b < m) {
    out.push_back(B(b++));
    out.push_back(W(w++));
  }
  while (w < m) out.push_back(W(w++));
  return out;
}

// The first rule of the schedule definitions `trace` breaks, or "" when none of these.
std::string BrokenRule(const ScheduleSpec& spec, absl::Span<const Action> expected,
                       absl::Span<const Action> trace) {
  using Key = std::tuple<ActionType, int, int>;
  auto key = [](const Action& a) { return Key{a.type, a.micro_batch, a.chunk}; };
  std::map<Key, int> seen;
  for (size_t i = 0; i < trace.size(); ++i) {
    const Action& a = trace[i];
    if (++seen[key(a)] > 1) {
      return absl::StrCat(ActionToString(a), " is repeated (position ", i, ")");
    }
    const bool is_b = a.type == ActionType::kBackward || a.type == ActionType::kBackwardInput;
    if (is_b && seen.count(Key{ActionType::kForward, a.micro_batch, a.chunk}) == 0) {
      return absl::StrCat(ActionToString(a), " runs before its forward ",
                          ActionToString(F(a.micro_batch, a.chunk)));
    }
    if (a.type == ActionType::kBackwardWeight &&
        seen.count(Key{ActionType::kBackwardInput, a.micro_batch, a.chunk}) == 0) {
      return absl::StrCat(ActionToString(a), " runs before its input-gradient ",
                          ActionToString({ActionType::kBackwardInput, a.micro_batch, a.chunk}));
    }
  }
  std::set<Key> wanted;
  for (const Action& a : expected) wanted.insert(key(a));
  for (const Action& a : trace) {
    if (wanted.count(key(a)) == 0) {
      return absl::StrCat(ActionToString(a), " is not part of the schedule ",
                          ScheduleName(spec.kind));
    }
  }
  for (const Action& a : expected) {
    if (seen.count(key(a)) == 0) return absl::StrCat(ActionToString(a), " is missing");
  }
  // The warm-up depth shows as the forwards run before the first backward (warm-up + 1 when
  // a steady phase follows).
  auto leading_forwards = [](absl::Span<const Action> actions) {
    size_t n = 0;
    while (n < actions.size() && actions[n].type == ActionType::kForward) ++n;
    return n;
  };
  if (leading_forwards(trace) != leading_forwards(expected)) {
    return absl::StrCat("warm-up depth: ", leading_forwards(trace),
                        " forwards before the first backward, expected ",
                        leading_forwards(expected));
  }
  return "";
}

}  // namespace

absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name) {
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB,
                            ScheduleKind::kInterleaved, ScheduleKind::kZeroBubbleH1}) {
    if (name == ScheduleName(kind)) return kind;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown pipeline schedule \"", name,
                                                 "\"; valid: gpipe, 1f1b, interleaved, zb-h1"));
}

std::string ScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGpipe:
      return "gpipe";
    case ScheduleKind::kOneFOneB:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
    case ScheduleKind::kZeroBubbleH1:
      return "zb-h1";
  }
  return absl::StrCat("schedule(", static_cast<int>(kind), ")");
}

absl::Status ValidateSchedule(const ScheduleSpec& spec) {
  const std::string name = ScheduleName(spec.kind);
  std::vector<std::string> problems;
  if (spec.stages < 1) problems.push_back(absl::StrCat("stages (", spec.stages, ") must be >= 1"));
  if (spec.micro_batches < 1) {
    problems.push_back(absl::StrCat("micro_batches (", spec.micro_batches, ") must be >= 1"));
  }
  if (spec.kind == ScheduleKind::kInterleaved) {
    if (spec.virtual_stages < 2) {
      problems.push_back(
          absl::StrCat("interleaved needs virtual_stages (", spec.virtual_stages, ") >= 2"));
    }
    if (spec.stages < 2) {
      problems.push_back(absl::StrCat("interleaved needs stages (", spec.stages, ") >= 2"));
    }
    if (spec.stages >= 1 && spec.micro_batches >= 1 && spec.micro_batches % spec.stages != 0) {
      problems.push_back(absl::StrCat("interleaved needs micro_batches (", spec.micro_batches,
                                      ") to be a multiple of stages (", spec.stages, ")"));
    }
  } else if (spec.virtual_stages != 1) {
    problems.push_back(absl::StrCat("virtual_stages (", spec.virtual_stages, ") must be 1 for ",
                                    name, "; only interleaved has virtual stages"));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid ", name, " schedule: ", absl::StrJoin(problems, "; ")));
}

absl::StatusOr<std::vector<Action>> StageActions(const ScheduleSpec& spec, int stage) {
  if (absl::Status valid = ValidateSchedule(spec); !valid.ok()) return valid;
  const int p = spec.stages, m = spec.micro_batches;
  if (stage < 0 || stage >= p) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", stage, " is outside 0..", p - 1, " (stages = ", p, ")"));
  }
  switch (spec.kind) {
    case ScheduleKind::kGpipe:
      return Gpipe(m);
    case ScheduleKind::kOneFOneB:
      return OneFOneB(p, m, stage);
    case ScheduleKind::kInterleaved:
      return Interleaved(p, m, spec.virtual_stages, stage);
    case ScheduleKind::kZeroBubbleH1:
      return ZeroBubbleH1(p, m, stage);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown schedule kind ", ScheduleName(spec.kind)));
}

std::string ActionToString(const Action& action) {
  const char* letter = "F";
  switch (action.type) {
    case ActionType::kForward:
      letter = "F";
      break;
    case ActionType::kBackward:
      letter = "BW";
      break;
    case ActionType::kBackwardInput:
      letter = "B";
      break;
    case ActionType::kBackwardWeight:
      letter = "W";
      break;
  }
  std::string out = absl::StrCat(letter, action.micro_batch);
  if (action.chunk != 0) absl::StrAppend(&out, ".", action.chunk);
  return out;
}

std::string TraceToString(absl::Span<const Action> trace) {
  return absl::StrJoin(trace, " ",
                       [](std::string* out, const Action& a) { out->append(ActionToString(a)); });
}

absl::Status CheckTrace(const ScheduleSpec& spec, int stage, absl::Span<const Action> trace) {
  absl::StatusOr<std::vector<Action>> expected = StageActions(spec, stage);
  if (!expected.ok()) return expected.status();
  const size_t n = std::min(expected->size(), trace.size());
  size_t i = 0;
  while (i < n && (*expected)[i] == trace[i]) ++i;
  if (i == expected->size() && i == trace.size()) return absl::OkStatus();

  std::string where;
  if (i == trace.size()) {
    where = absl::StrCat("the trace ends at position ", i, " where ",
                         ActionToString((*expected)[i]), " is expected");
  } else if (i == expected->size()) {
    where = absl::StrCat("position ", i, ": the schedule has ended but the trace has ",
                         ActionToString(trace[i]));
  } else {
    where = absl::StrCat("position ", i, ": expected ", ActionToString((*expected)[i]), ", got ",
                         ActionToString(trace[i]));
  }
  std::string message = absl::StrCat("stage ", stage, " of ", ScheduleName(spec.kind),
                                     " (p=", spec.stages, " m=", spec.micro_batches);
  if (spec.virtual_stages > 1) absl::StrAppend(&message, " v=", spec.virtual_stages);
  absl::StrAppend(&message, ") differs at ", where);
  const std::string rule = BrokenRule(spec, *expected, trace);
  if (!rule.empty()) absl::StrAppend(&message, "; broken rule: ", rule);
  return absl::FailedPreconditionError(message);
}

}  // namespace dtrain::pipeline
