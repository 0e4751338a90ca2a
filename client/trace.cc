#include "client/trace.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "plan/ready_work.h"
#include "plan/schedule.h"
#include "plan/spec_enums.h"

namespace dtrain::client {
namespace {

using pipeline::Action;
using pipeline::ActionType;

// JSON string literal (the texts are ASCII names; control characters escaped all the same).
std::string Quote(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Micros(double us) { return absl::StrFormat("%.3f", us); }

// The tracks of a rank, in display order.
enum Track { kActions = 1, kCollectives = 2, kReceives = 3, kSends = 4, kCheckpoint = 5 };
constexpr const char* kTrackNames[] = {"",         "F / B / W", "collectives",
                                       "receives", "sends",     "checkpoint"};
constexpr int kLanesPerTrack = 100;  // tid = track * 100 + lane

Track TrackOf(const FlightEntry& e) {
  switch (e.op()) {
    case FlightEntry::COLLECTIVE:
      return kCollectives;
    case FlightEntry::RECV:
      return kReceives;
    case FlightEntry::SEND:
      return kSends;
    case FlightEntry::CHECKPOINT:
      return kCheckpoint;
    default:
      return kActions;
  }
}

bool IsAction(const FlightEntry& e) { return TrackOf(e) == kActions; }

const char* KindName(MessageKind kind) {
  switch (kind) {
    case ACTIVATION:
      return "activation";
    case GRADIENT:
      return "gradient";
    case ABORT:
      return "abort";
    default:
      return "collective";
  }
}

// "F3", "B3.1": an action in the schedule's vocabulary (fused backward: "B").
std::string ActionName(ActionType type, int micro_batch, int chunk) {
  const char* letter = type == ActionType::kForward          ? "F"
                       : type == ActionType::kBackwardWeight ? "W"
                                                             : "B";
  std::string name = absl::StrCat(letter, micro_batch);
  if (chunk > 0) absl::StrAppend(&name, ".", chunk);
  return name;
}

std::string EventName(const FlightEntry& e) {
  switch (e.op()) {
    case FlightEntry::FORWARD:
    case FlightEntry::BACKWARD_INPUT:
    case FlightEntry::BACKWARD_WEIGHT: {
      const char* letter = e.op() == FlightEntry::FORWARD          ? "F"
                           : e.op() == FlightEntry::BACKWARD_INPUT ? "B"
                                                                   : "W";
      return absl::StrCat(letter, " mb", e.micro_batch(), " vs", e.virtual_stage());
    }
    case FlightEntry::SEND:
    case FlightEntry::RECV: {
      const bool send = e.op() == FlightEntry::SEND;
      std::string what =
          e.kind() == COLLECTIVE
              ? absl::StrCat("collective g", e.group(), " s", e.seq(), " p", e.part())
              : absl::StrCat(KindName(e.kind()), " mb", e.micro_batch());
      return absl::StrCat(send ? "send " : "recv ", what, send ? " to rank " : " from rank ",
                          e.peer());
    }
    case FlightEntry::CHECKPOINT:
      return absl::StrCat("checkpoint ", e.what());
    default:
      return e.what().empty() ? "collective" : e.what();
  }
}

// The message a send or receive carries, the same on both sides.
using MessageId = std::tuple<int, int64_t, int, int, int, int64_t, int>;
MessageId KeyOf(const FlightEntry& e) {
  return {e.kind(), e.step(), e.micro_batch(), e.virtual_stage(), e.group(), e.seq(), e.part()};
}

// One slice as drawn: coordinator-clock microseconds from the trace's zero.
struct Slice {
  const FlightEntry* entry;
  int rank;
  double ts;
  double dur;  // drawn: at least 1 µs
  int tid;
};

constexpr double kMinDrawnMicros = 1.0;

// The args of a slice: the record's fields that it has.
std::string Args(const FlightEntry& e, int64_t true_dur_ns) {
  std::vector<std::string> a;
  a.push_back(absl::StrCat("\"state\":", Quote(FlightEntry::State_Name(e.state()))));
  a.push_back(absl::StrCat("\"dur_ns\":", true_dur_ns));
  if (e.step() >= 0) a.push_back(absl::StrCat("\"step\":", e.step()));
  if (e.micro_batch() >= 0) a.push_back(absl::StrCat("\"micro_batch\":", e.micro_batch()));
  if (e.virtual_stage() >= 0) {
    a.push_back(absl::StrCat("\"virtual_stage\":", e.virtual_stage()));
  }
  if (e.op() == FlightEntry::SEND || e.op() == FlightEntry::RECV) {
    a.push_back(absl::StrCat("\"peer\":", e.peer()));
    a.push_back(absl::StrCat("\"kind\":", Quote(KindName(e.kind()))));
  }
  if (e.group() >= 0) a.push_back(absl::StrCat("\"group\":", e.group()));
  if (e.seq() >= 0) a.push_back(absl::StrCat("\"seq\":", e.seq()));
  if (e.part() >= 0) a.push_back(absl::StrCat("\"part\":", e.part()));
  if (e.bytes() > 0) a.push_back(absl::StrCat("\"bytes\":", e.bytes()));
  if (!e.what().empty()) a.push_back(absl::StrCat("\"what\":", Quote(e.what())));
  return absl::StrCat("{", absl::StrJoin(a, ","), "}");
}

// The verdict of an order that differs from the list but keeps ready work's rules.
constexpr char kReordered[] = "ok: reordered by ready work within plan/ready_work.h's rules";

// The schedule's F / B / W order for `stage`, and the recorded one with its check.
struct ScheduleCheck {
  std::vector<std::string> expected;
  std::vector<std::string> recorded;
  std::string verdict;  // "ok", or why not
};

// The trace's schedule: its kind, or its text parsed (a coordinator of an earlier release sent
// the text only); UNSPECIFIED when neither names one.
PipelineSchedule ScheduleOf(const JobTrace& trace) {
  if (trace.schedule_kind() != SCHEDULE_UNSPECIFIED) return trace.schedule_kind();
  return plan::ParseSchedule(trace.schedule()).value_or(SCHEDULE_UNSPECIFIED);
}

ScheduleCheck CheckSchedule(const JobTrace& trace, const RankState& rank, int stage) {
  ScheduleCheck check;
  std::vector<Action> recorded;
  const PipelineSchedule schedule = ScheduleOf(trace);
  const bool split = schedule == SCHEDULE_ZB_H1;
  for (const FlightEntry& e : rank.recorder().entries()) {
    if (!IsAction(e)) continue;
    Action a;
    a.type = e.op() == FlightEntry::FORWARD           ? ActionType::kForward
             : e.op() == FlightEntry::BACKWARD_WEIGHT ? ActionType::kBackwardWeight
             : split                                  ? ActionType::kBackwardInput
                                                      : ActionType::kBackward;
    a.micro_batch = e.micro_batch();
    a.chunk = std::max(0, e.virtual_stage());
    recorded.push_back(a);
    check.recorded.push_back(ActionName(a.type, a.micro_batch, a.chunk));
  }
  if (schedule == SCHEDULE_UNSPECIFIED) {
    check.verdict = absl::StrCat("unknown schedule \"", trace.schedule(), "\"");
    return check;
  }
  pipeline::ScheduleSpec spec;
  spec.kind = plan::ScheduleKindOf(schedule);
  spec.stages = 1;
  for (int s : trace.rank_stages()) spec.stages = std::max(spec.stages, s + 1);
  spec.micro_batches = trace.micro_batches();
  spec.virtual_stages = std::max(1, trace.virtual_stages());
  absl::StatusOr<std::vector<Action>> expected = pipeline::StageActions(spec, stage);
  if (!expected.ok()) {
    check.verdict = std::string(expected.status().message());
    return check;
  }
  for (const Action& a : *expected) {
    check.expected.push_back(ActionName(a.type, a.micro_batch, a.chunk));
  }
  const absl::Status matches = pipeline::CheckTrace(spec, stage, recorded);
  check.verdict = matches.ok() ? "ok" : std::string(matches.message());
  // Ready work runs an allowed reordering of the list (plan/ready_work.h), recorded as run.
  if (!matches.ok() &&
      pipeline::CheckExecutedTrace(spec, stage, pipeline::Execution::kReadyWork, recorded).ok()) {
    check.verdict = kReordered;
  }
  return check;
}

std::string QuotedList(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& s : items) quoted.push_back(Quote(s));
  return absl::StrCat("[", absl::StrJoin(quoted, ","), "]");
}

}  // namespace

std::string ChromeTraceJson(const JobTrace& trace) {
  // Zero: the step's first operation on the coordinator's clock.
  int64_t zero_ns = std::numeric_limits<int64_t>::max();
  for (const RankState& r : trace.ranks()) {
    for (const FlightEntry& e : r.recorder().entries()) {
      zero_ns = std::min(zero_ns, e.start_unix_ns() - r.clock_offset_ns());
    }
  }
  if (zero_ns == std::numeric_limits<int64_t>::max()) zero_ns = 0;

  std::vector<std::string> events;
  std::vector<Slice> slices;
  for (const RankState& r : trace.ranks()) {
    const int pid = r.rank() + 1;
    events.push_back(absl::StrCat(
        "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":", pid, ",\"tid\":0,\"args\":{\"name\":",
        Quote(absl::StrCat("rank ", r.rank(), " (", r.worker_id(), ", ", r.label(), ")",
                           r.answered() ? "" : absl::StrCat(": ", r.error()))),
        "}}"));
    events.push_back(absl::StrCat("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":", pid,
                                  ",\"tid\":0,\"args\":{\"sort_index\":", r.rank(), "}}"));
    // Lanes per track: each lane's drawn end, so overlapping operations get their own lane.
    std::map<int, std::vector<double>> lane_ends;
    for (const FlightEntry& e : r.recorder().entries()) {
      const int64_t end_ns = e.end_unix_ns() > 0 ? e.end_unix_ns() : r.recorder().now_unix_ns();
      const double ts =
          static_cast<double>(e.start_unix_ns() - r.clock_offset_ns() - zero_ns) / 1e3;
      const double dur =
          std::max(kMinDrawnMicros, static_cast<double>(end_ns - e.start_unix_ns()) / 1e3);
      const Track track = TrackOf(e);
      std::vector<double>& ends = lane_ends[track];
      size_t lane = 0;
      while (lane < ends.size() && ends[lane] > ts) ++lane;
      if (lane == ends.size()) ends.push_back(0);
      ends[lane] = ts + dur;
      const int tid = track * kLanesPerTrack + static_cast<int>(lane);
      slices.push_back({&e, r.rank(), ts, dur, tid});
      std::string name = EventName(e);
      if (e.state() == FlightEntry::FAILED) absl::StrAppend(&name, " (failed)");
      events.push_back(absl::StrCat(
          "{\"ph\":\"X\",\"name\":", Quote(name), ",\"cat\":", Quote(kTrackNames[track]),
          ",\"pid\":", pid, ",\"tid\":", tid, ",\"ts\":", Micros(ts), ",\"dur\":", Micros(dur),
          ",\"args\":", Args(e, std::max<int64_t>(0, end_ns - e.start_unix_ns())), "}"));
    }
    for (const auto& [track, ends] : lane_ends) {
      for (size_t lane = 0; lane < ends.size(); ++lane) {
        const int tid = track * kLanesPerTrack + static_cast<int>(lane);
        const std::string name =
            lane == 0 ? kTrackNames[track] : absl::StrCat(kTrackNames[track], " ", lane + 1);
        events.push_back(absl::StrCat("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":", pid,
                                      ",\"tid\":", tid, ",\"args\":{\"name\":", Quote(name), "}}"));
        events.push_back(absl::StrCat("{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":", pid,
                                      ",\"tid\":", tid, ",\"args\":{\"sort_index\":", tid, "}}"));
      }
    }
  }

  // Flow arrows: each send to the receive of the same message on its peer. The points lie
  // inside their slices (0.5 µs in from the send's start and the receive's end).
  std::map<std::tuple<int, int, MessageId>, const Slice*> receives;  // (rank, from, key)
  for (const Slice& s : slices) {
    if (s.entry->op() == FlightEntry::RECV) {
      receives[{s.rank, s.entry->peer(), KeyOf(*s.entry)}] = &s;
    }
  }
  int flows = 0;
  for (const Slice& s : slices) {
    if (s.entry->op() != FlightEntry::SEND) continue;
    auto it = receives.find({s.entry->peer(), s.rank, KeyOf(*s.entry)});
    if (it == receives.end()) continue;
    const Slice& r = *it->second;
    const int id = ++flows;
    const std::string name = Quote(KindName(s.entry->kind()));
    events.push_back(absl::StrCat("{\"ph\":\"s\",\"id\":", id, ",\"name\":", name,
                                  ",\"cat\":\"message\",\"pid\":", s.rank + 1, ",\"tid\":", s.tid,
                                  ",\"ts\":", Micros(s.ts + std::min(0.5, s.dur / 2)), "}"));
    events.push_back(absl::StrCat("{\"ph\":\"f\",\"bp\":\"e\",\"id\":", id, ",\"name\":", name,
                                  ",\"cat\":\"message\",\"pid\":", r.rank + 1, ",\"tid\":", r.tid,
                                  ",\"ts\":", Micros(r.ts + r.dur - std::min(0.5, r.dur / 2)),
                                  "}"));
  }

  // Metadata: what the trace is of, the clocks, and the schedule check per rank.
  std::vector<std::string> clocks, missing, schedule;
  for (const RankState& r : trace.ranks()) {
    if (!r.answered()) {
      missing.push_back(
          Quote(absl::StrCat("rank ", r.rank(), " (", r.worker_id(), "): ", r.error())));
      continue;
    }
    clocks.push_back(absl::StrCat("{\"rank\":", r.rank(), ",\"worker\":", Quote(r.worker_id()),
                                  ",\"offset_ns\":", r.clock_offset_ns(),
                                  ",\"error_bound_ns\":", r.clock_error_ns(), "}"));
    const int stage = r.rank() < trace.rank_stages_size() ? trace.rank_stages(r.rank()) : 0;
    const ScheduleCheck check = CheckSchedule(trace, r, stage);
    schedule.push_back(absl::StrCat(
        "{\"rank\":", r.rank(), ",\"stage\":", stage, ",\"expected\":", QuotedList(check.expected),
        ",\"recorded\":", QuotedList(check.recorded), ",\"check\":", Quote(check.verdict), "}"));
  }
  std::vector<std::string> available;
  for (int64_t s : trace.available_steps()) available.push_back(absl::StrCat(s));
  const std::string metadata = absl::StrCat(
      "{\"job_id\":", Quote(trace.job_id()), ",\"step\":", trace.step(), ",\"available_steps\":[",
      absl::StrJoin(available, ","), "]", ",\"schedule\":", Quote(trace.schedule()),
      ",\"micro_batches\":", trace.micro_batches(), ",\"virtual_stages\":", trace.virtual_stages(),
      ",\"clock\":\"the coordinator's; ts 0 = the step's first operation\"",
      ",\"zero_unix_ns\":", zero_ns, ",\"clock_offsets\":[", absl::StrJoin(clocks, ","), "]",
      ",\"ranks_not_answered\":[", absl::StrJoin(missing, ","), "]", ",\"schedule_order\":[",
      absl::StrJoin(schedule, ","), "]",
      ",\"gather_seconds\":", absl::StrFormat("%.3f", trace.gather_seconds()), "}");
  return absl::StrCat("{\"displayTimeUnit\":\"ms\",\n\"metadata\":", metadata,
                      ",\n\"traceEvents\":[\n", absl::StrJoin(events, ",\n"), "\n]}\n");
}

std::string TraceSummary(const JobTrace& trace, const std::string& path) {
  int64_t max_offset = 0, max_error = 0;
  std::vector<std::string> problems, reordered;
  int answered = 0;
  for (const RankState& r : trace.ranks()) {
    if (!r.answered()) {
      problems.push_back(
          absl::StrCat("rank ", r.rank(), " (", r.worker_id(), ") did not answer: ", r.error()));
      continue;
    }
    ++answered;
    max_offset = std::max(max_offset, std::abs(r.clock_offset_ns()));
    max_error = std::max(max_error, r.clock_error_ns());
    const int stage = r.rank() < trace.rank_stages_size() ? trace.rank_stages(r.rank()) : 0;
    const ScheduleCheck check = CheckSchedule(trace, r, stage);
    if (check.verdict == kReordered) {
      reordered.push_back(absl::StrCat(r.rank()));
    } else if (check.verdict != "ok") {
      problems.push_back(absl::StrCat("rank ", r.rank(), "'s F / B / W order: ", check.verdict));
    }
  }
  std::string text = absl::StrFormat(
      "wrote %s: step %d of %s, %d of %d ranks (clock offsets within %.3f ms, each known to "
      "+-%.3f ms); ",
      path, trace.step(), trace.job_id(), answered, trace.ranks_size(), max_offset / 1e6,
      max_error / 1e6);
  if (problems.empty()) {
    absl::StrAppend(&text, "F / B / W order as the schedule (", trace.schedule(),
                    ") defines on every rank");
    if (!reordered.empty()) {
      absl::StrAppend(&text, " (reordered by ready work within its rules on rank",
                      reordered.size() > 1 ? "s " : " ", absl::StrJoin(reordered, ", "), ")");
    }
  } else {
    absl::StrAppend(&text, absl::StrJoin(problems, "; "));
  }
  return absl::StrCat(text, "; open it in ui.perfetto.dev or chrome://tracing\n");
}

}  // namespace dtrain::client
