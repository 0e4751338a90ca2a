#include "client/trace.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace dtrain::client {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kT0 = 1'700'000'000'000'000'000;  // Unix ns
constexpr int64_t kUs = 1000;

FlightEntry Action(FlightEntry::Op op, int mb, int64_t start_us, int64_t end_us) {
  FlightEntry e;
  e.set_op(op);
  e.set_state(FlightEntry::DONE);
  e.set_step(7);
  e.set_micro_batch(mb);
  e.set_virtual_stage(0);
  e.set_peer(-1);
  e.set_group(-1);
  e.set_seq(-1);
  e.set_part(-1);
  e.set_start_unix_ns(kT0 + start_us * kUs);
  e.set_end_unix_ns(kT0 + end_us * kUs);
  return e;
}

FlightEntry Message(FlightEntry::Op op, MessageKind kind, int peer, int mb, int64_t start_us,
                    int64_t end_us) {
  FlightEntry e = Action(op, mb, start_us, end_us);
  e.set_kind(kind);
  e.set_peer(peer);
  e.set_bytes(4096);
  return e;
}

// pp=2 1f1b with 2 micro-batches. Stage 0: F0 F1 B0 B1, then a checkpoint snapshot; stage 1:
// F0 B0 F1 B1. Rank 1's clock is 1 s ahead of the coordinator's (offset +1 s): its records read
// 1 s later than they happened.
JobTrace TwoStages() {
  JobTrace t;
  t.set_job_id("job-000003");
  t.set_step(7);
  t.add_available_steps(6);
  t.add_available_steps(7);
  t.set_schedule("1f1b");
  t.set_micro_batches(2);
  t.set_virtual_stages(1);
  t.add_rank_stages(0);
  t.add_rank_stages(1);
  RankState& s0 = *t.add_ranks();
  s0.set_rank(0);
  s0.set_worker_id("w1");
  s0.set_label("dp0 pp0 tp0");
  s0.set_answered(true);
  s0.set_clock_error_ns(50 * kUs);
  RankDiagnosis& r0 = *s0.mutable_recorder();
  *r0.add_entries() = Action(FlightEntry::FORWARD, 0, 0, 100);
  *r0.add_entries() = Message(FlightEntry::SEND, ACTIVATION, 1, 0, 100, 100);
  *r0.add_entries() = Action(FlightEntry::FORWARD, 1, 100, 200);
  *r0.add_entries() = Message(FlightEntry::SEND, ACTIVATION, 1, 1, 200, 200);
  *r0.add_entries() = Message(FlightEntry::RECV, GRADIENT, 1, 0, 200, 400);
  *r0.add_entries() = Message(FlightEntry::RECV, GRADIENT, 1, 1, 250, 600);  // overlaps
  *r0.add_entries() = Action(FlightEntry::BACKWARD_INPUT, 0, 400, 500);
  *r0.add_entries() = Action(FlightEntry::BACKWARD_INPUT, 1, 600, 700);
  FlightEntry snapshot = Action(FlightEntry::CHECKPOINT, -1, 700, 710);
  snapshot.set_what("snapshot");
  *r0.add_entries() = snapshot;
  RankState& s1 = *t.add_ranks();
  s1.set_rank(1);
  s1.set_worker_id("w2");
  s1.set_label("dp0 pp1 tp0");
  s1.set_answered(true);
  s1.set_clock_offset_ns(1'000'000 * kUs);
  s1.set_clock_error_ns(40 * kUs);
  RankDiagnosis& r1 = *s1.mutable_recorder();
  const int64_t ahead = 1'000'000;  // µs
  *r1.add_entries() = Message(FlightEntry::RECV, ACTIVATION, 0, 0, ahead + 50, ahead + 101);
  *r1.add_entries() = Action(FlightEntry::FORWARD, 0, ahead + 101, ahead + 200);
  *r1.add_entries() = Action(FlightEntry::BACKWARD_INPUT, 0, ahead + 200, ahead + 300);
  *r1.add_entries() = Message(FlightEntry::SEND, GRADIENT, 0, 0, ahead + 300, ahead + 300);
  *r1.add_entries() = Message(FlightEntry::RECV, ACTIVATION, 0, 1, ahead + 300, ahead + 301);
  *r1.add_entries() = Action(FlightEntry::FORWARD, 1, ahead + 301, ahead + 400);
  *r1.add_entries() = Action(FlightEntry::BACKWARD_INPUT, 1, ahead + 400, ahead + 500);
  *r1.add_entries() = Message(FlightEntry::SEND, GRADIENT, 0, 1, ahead + 500, ahead + 500);
  return t;
}

Struct Parse(const std::string& json) {
  Struct s;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &s);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return s;
}

std::vector<Struct> Events(const Struct& trace, const std::string& ph) {
  std::vector<Struct> out;
  for (const Value& v : trace.fields().at("traceEvents").list_value().values()) {
    if (v.struct_value().fields().at("ph").string_value() == ph) out.push_back(v.struct_value());
  }
  return out;
}

std::string Str(const Struct& s, const std::string& key) {
  return s.fields().at(key).string_value();
}
double Num(const Struct& s, const std::string& key) { return s.fields().at(key).number_value(); }

TEST(ChromeTraceJson, AProcessPerRankNamedWithItsWorkerAndLabel) {
  const Struct trace = Parse(ChromeTraceJson(TwoStages()));
  EXPECT_EQ(Str(trace, "displayTimeUnit"), "ms");
  std::vector<std::string> names;
  for (const Struct& m : Events(trace, "M")) {
    if (Str(m, "name") == "process_name") {
      names.push_back(m.fields().at("args").struct_value().fields().at("name").string_value());
    }
  }
  EXPECT_THAT(names, ElementsAre("rank 0 (w1, dp0 pp0 tp0)", "rank 1 (w2, dp0 pp1 tp0)"));
}

TEST(ChromeTraceJson, SlicesOnTheCoordinatorsClockFromTheStepsFirstOperation) {
  const Struct trace = Parse(ChromeTraceJson(TwoStages()));
  std::map<std::string, std::vector<double>> starts;  // "pid name" -> ts
  for (const Struct& x : Events(trace, "X")) {
    EXPECT_GE(Num(x, "dur"), 1.0);  // drawn at least 1 µs
    starts[absl::StrCat(Num(x, "pid"), " ", Str(x, "name"))].push_back(Num(x, "ts"));
  }
  EXPECT_THAT(starts["1 F mb0 vs0"], ElementsAre(0.0));
  EXPECT_THAT(starts["1 B mb1 vs0"], ElementsAre(600.0));
  // Rank 1's clock 1 s ahead is taken back: its F0 starts right after rank 0's send.
  EXPECT_THAT(starts["2 F mb0 vs0"], ElementsAre(101.0));
  EXPECT_THAT(starts["2 recv activation mb1 from rank 0"], ElementsAre(300.0));
  EXPECT_THAT(starts["1 send activation mb0 to rank 1"], ElementsAre(100.0));
  EXPECT_THAT(starts["1 checkpoint snapshot"], ElementsAre(700.0));
}

TEST(ChromeTraceJson, EverySendHasAnArrowToItsReceiveOnThePeer) {
  const Struct trace = Parse(ChromeTraceJson(TwoStages()));
  const std::vector<Struct> starts = Events(trace, "s");
  const std::vector<Struct> finishes = Events(trace, "f");
  ASSERT_EQ(starts.size(), 4u);  // 2 activations, 2 gradients
  ASSERT_EQ(finishes.size(), 4u);
  std::map<double, std::pair<double, double>> by_id;  // id -> (start pid, finish pid)
  for (const Struct& s : starts) by_id[Num(s, "id")].first = Num(s, "pid");
  for (const Struct& f : finishes) {
    EXPECT_EQ(Str(f, "bp"), "e");
    by_id[Num(f, "id")].second = Num(f, "pid");
  }
  ASSERT_EQ(by_id.size(), 4u);
  for (const auto& [id, pids] : by_id) EXPECT_NE(pids.first, pids.second) << id;
}

TEST(ChromeTraceJson, OverlappingReceivesGetASecondTrack) {
  const Struct trace = Parse(ChromeTraceJson(TwoStages()));
  std::vector<std::string> threads;
  for (const Struct& m : Events(trace, "M")) {
    if (Str(m, "name") == "thread_name" && Num(m, "pid") == 1) {
      threads.push_back(m.fields().at("args").struct_value().fields().at("name").string_value());
    }
  }
  EXPECT_THAT(threads, ElementsAre("F / B / W", "receives", "receives 2", "sends", "checkpoint"));
}

TEST(ChromeTraceJson, MetadataHasClocksAndTheScheduleCheckPerRank) {
  const std::string json = ChromeTraceJson(TwoStages());
  const Struct trace = Parse(json);
  const Struct& meta = trace.fields().at("metadata").struct_value();
  EXPECT_EQ(Num(meta, "step"), 7);
  EXPECT_EQ(Str(meta, "schedule"), "1f1b");
  const auto& clocks = meta.fields().at("clock_offsets").list_value();
  ASSERT_EQ(clocks.values_size(), 2);
  EXPECT_EQ(Num(clocks.values(1).struct_value(), "offset_ns"), 1e9);
  EXPECT_EQ(Num(clocks.values(1).struct_value(), "error_bound_ns"), 40e3);
  const auto& order = meta.fields().at("schedule_order").list_value();
  ASSERT_EQ(order.values_size(), 2);
  EXPECT_EQ(Str(order.values(0).struct_value(), "check"), "ok");
  EXPECT_EQ(Str(order.values(1).struct_value(), "check"), "ok");
  EXPECT_THAT(json, HasSubstr("\"expected\":[\"F0\",\"F1\",\"B0\",\"B1\"]"));
  EXPECT_THAT(json, HasSubstr("\"expected\":[\"F0\",\"B0\",\"F1\",\"B1\"]"));
}

// The check follows the schedule's kind (JobTrace.schedule_kind), not its text; a trace with
// the text only (a coordinator of an earlier release) is checked by the text parsed.
TEST(ChromeTraceJson, TheScheduleCheckFollowsTheScheduleKind) {
  JobTrace t = TwoStages();
  t.set_schedule_kind(SCHEDULE_GPIPE);  // all F then all B: stage 1's F0 B0 F1 B1 is out of order
  Struct trace = Parse(ChromeTraceJson(t));
  auto order =
      trace.fields().at("metadata").struct_value().fields().at("schedule_order").list_value();
  EXPECT_EQ(Str(order.values(0).struct_value(), "check"), "ok");
  EXPECT_NE(Str(order.values(1).struct_value(), "check"), "ok");
  t.set_schedule_kind(SCHEDULE_UNSPECIFIED);
  t.set_schedule("zigzag");
  trace = Parse(ChromeTraceJson(t));
  order = trace.fields().at("metadata").struct_value().fields().at("schedule_order").list_value();
  EXPECT_EQ(Str(order.values(0).struct_value(), "check"), "unknown schedule \"zigzag\"");
}

TEST(ChromeTraceJson, AnOrderOtherThanTheSchedulesIsReported) {
  JobTrace t = TwoStages();
  // Rank 0 ran B0 after B1.
  t.mutable_ranks(0)->mutable_recorder()->mutable_entries(6)->set_micro_batch(1);
  t.mutable_ranks(0)->mutable_recorder()->mutable_entries(7)->set_micro_batch(0);
  const Struct trace = Parse(ChromeTraceJson(t));
  const auto& order =
      trace.fields().at("metadata").struct_value().fields().at("schedule_order").list_value();
  EXPECT_THAT(Str(order.values(0).struct_value(), "check"), HasSubstr("position 2"));
}

// ZB-H1 on 2 stages, 2 micro-batches: stage 1's list is F0 B0 F1 B1 W0 W1; under ready work it
// ran W0 before F1 (F1's activation was late). The recorded order is the one run, and it passes.
TEST(ChromeTraceJson, AReadyWorkReorderingShowsTheOrderRunAndPasses) {
  JobTrace t = TwoStages();
  t.set_schedule("zb-h1");
  const FlightEntry::Op F = FlightEntry::FORWARD, B = FlightEntry::BACKWARD_INPUT,
                        W = FlightEntry::BACKWARD_WEIGHT;
  int64_t at = 0;
  auto record = [&](int rank, const std::vector<std::pair<FlightEntry::Op, int>>& actions) {
    RankDiagnosis& r = *t.mutable_ranks(rank)->mutable_recorder();
    r.clear_entries();
    for (const auto& [op, mb] : actions) {
      *r.add_entries() = Action(op, mb, at, at + 100);
      at += 100;
    }
    return &r;
  };
  record(0, {{F, 0}, {F, 1}, {B, 0}, {W, 0}, {B, 1}, {W, 1}});  // its list
  RankDiagnosis& r1 = *record(1, {{F, 0}, {B, 0}, {W, 0}, {F, 1}, {B, 1}, {W, 1}});
  const std::string json = ChromeTraceJson(t);
  const Struct parsed = Parse(json);
  const auto& order =
      parsed.fields().at("metadata").struct_value().fields().at("schedule_order").list_value();
  EXPECT_EQ(Str(order.values(0).struct_value(), "check"), "ok");
  EXPECT_THAT(Str(order.values(1).struct_value(), "check"), HasSubstr("reordered by ready work"));
  EXPECT_THAT(json, HasSubstr("\"expected\":[\"F0\",\"B0\",\"F1\",\"B1\",\"W0\",\"W1\"]"));
  EXPECT_THAT(json, HasSubstr("\"recorded\":[\"F0\",\"B0\",\"W0\",\"F1\",\"B1\",\"W1\"]"));
  const std::string summary = TraceSummary(t, "trace.json");
  EXPECT_THAT(summary, HasSubstr("defines on every rank (reordered by ready work within its "
                                 "rules on rank 1)"))
      << summary;
  // B1 before B0 breaks a rule (B's in the list's order): reported.
  r1.mutable_entries(1)->set_micro_batch(1);
  r1.mutable_entries(4)->set_micro_batch(0);
  EXPECT_THAT(TraceSummary(t, "trace.json"), HasSubstr("rank 1's F / B / W order"));
}

TEST(ChromeTraceJson, ARankThatDidNotAnswerIsNamedWithItsError) {
  JobTrace t = TwoStages();
  RankState& r1 = *t.mutable_ranks(1);
  r1.set_answered(false);
  r1.set_error("no answer by the deadline");
  r1.clear_recorder();
  const std::string json = ChromeTraceJson(t);
  Parse(json);
  EXPECT_THAT(json, HasSubstr("rank 1 (w2, dp0 pp1 tp0): no answer by the deadline"));
}

}  // namespace
}  // namespace dtrain::client
