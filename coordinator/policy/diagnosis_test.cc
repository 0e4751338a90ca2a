// The analysis of `dtrain diagnose` on hand-built recorders: each case is a moment of a job
// (who is in which operation since when) and the findings a person should read.
#include "coordinator/policy/diagnosis.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

constexpr int64_t kNow = 1'000'000'000'000;  // each rank's clock when it answered (ns)
constexpr int64_t kSecond = 1'000'000'000;

// A rank of a job, answering or not.
RankState& AddRank(JobDiagnosis& d, int rank, const std::string& label, bool answered = true) {
  RankState& r = *d.add_ranks();
  r.set_rank(rank);
  r.set_worker_id(absl::StrCat("w", rank + 1));
  r.set_address(absl::StrCat("127.0.0.1:", 7071 + rank));
  r.set_label(label);
  r.set_answered(answered);
  r.set_heartbeat_age_seconds(0.4);
  if (answered) {
    r.mutable_recorder()->set_rank(rank);
    r.mutable_recorder()->set_now_unix_ns(kNow);
  } else {
    r.set_error("Deadline Exceeded");
  }
  return r;
}

// An entry started `ago` seconds before the rank answered, open unless `done`.
FlightEntry& Add(RankState& r, FlightEntry::Op op, double ago, bool done = false) {
  FlightEntry& e = *r.mutable_recorder()->add_entries();
  e.set_id(r.recorder().entries_size());
  e.set_op(op);
  e.set_state(done ? FlightEntry::DONE : FlightEntry::STARTED);
  e.set_start_unix_ns(kNow - static_cast<int64_t>(ago * kSecond));
  if (done) e.set_end_unix_ns(e.start_unix_ns());
  e.set_peer(-1);
  e.set_group(-1);
  e.set_seq(-1);
  e.set_part(-1);
  return e;
}

FlightEntry& Action(RankState& r, FlightEntry::Op op, int64_t step, int mb, double ago) {
  FlightEntry& e = Add(r, op, ago);
  e.set_step(step);
  e.set_micro_batch(mb);
  e.set_virtual_stage(0);
  return e;
}

FlightEntry& Message(RankState& r, FlightEntry::Op op, MessageKind kind, int peer, int64_t step,
                     int mb, double ago, bool done = false) {
  FlightEntry& e = Add(r, op, ago, done);
  e.set_kind(kind);
  e.set_peer(peer);
  e.set_step(step);
  e.set_micro_batch(mb);
  e.set_virtual_stage(0);
  return e;
}

// Rank `r` waits in collective `group`/`seq`, receiving from `peer`.
void InCollective(RankState& r, int group, int64_t seq, int peer, double ago) {
  FlightEntry& c = Add(r, FlightEntry::COLLECTIVE, ago);
  c.set_group(group);
  c.set_seq(seq);
  c.set_what("all-reduce sum of 1000 floats");
  FlightEntry& m = Add(r, FlightEntry::RECV, ago);
  m.set_kind(COLLECTIVE);
  m.set_peer(peer);
  m.set_group(group);
  m.set_seq(seq);
  m.set_part(0);
}

std::string Findings(const JobDiagnosis& d) { return absl::StrJoin(d.findings(), "\n"); }

TEST(RankList, RangesAndSingles) {
  EXPECT_EQ(RankList({5}), "rank 5");
  EXPECT_EQ(RankList({4, 1, 2, 3, 6}), "ranks 1-4, 6");
  EXPECT_EQ(RankList({0, 1}), "ranks 0, 1");
  EXPECT_EQ(RankList({}), "ranks ");
}

TEST(Analyse, HealthyPipelineWaitsOnlyMilliseconds) {
  JobDiagnosis d;
  RankState& r0 = AddRank(d, 0, "dp0 pp0 tp0");
  Action(r0, FlightEntry::BACKWARD_INPUT, 12, 1, 0.010);
  Message(r0, FlightEntry::RECV, GRADIENT, 1, 12, 1, 0.005);
  RankState& r1 = AddRank(d, 1, "dp0 pp1 tp0");
  Action(r1, FlightEntry::FORWARD, 12, 2, 0.002);
  const JobDiagnosis a = Analyse(d);
  EXPECT_EQ(a.summary(), "healthy: no rank waiting longer than 1.0 s");
  EXPECT_EQ(a.findings_size(), 0) << Findings(a);
  EXPECT_EQ(a.root_ranks_size(), 0);
  EXPECT_EQ(a.ranks(0).waits_on_size(), 0);
  EXPECT_TRUE(absl::StrContains(a.ranks(0).doing(),
                                "waits for rank 1's gradient (step 12, "
                                "micro-batch 1) for 0.0 s, in B of "
                                "micro-batch 1, step 12"))
      << a.ranks(0).doing();
  EXPECT_TRUE(a.ranks(1).compute());
}

TEST(Analyse, ARankThatDoesNotAnswerIsTheRootOfThoseWaitingOnIt) {
  JobDiagnosis d;
  RankState& r0 = AddRank(d, 0, "dp0 pp0 tp0");
  Action(r0, FlightEntry::BACKWARD_INPUT, 120, 3, 4.2);
  Message(r0, FlightEntry::RECV, GRADIENT, 1, 120, 3, 4.2);
  AddRank(d, 1, "dp0 pp1 tp0", /*answered=*/false);
  const JobDiagnosis a = Analyse(d);
  EXPECT_EQ(a.summary(),
            "root: rank 1 (w2, dp0 pp1 tp0) did not answer in 2s (process stopped or hung? last "
            "heartbeat 0.4 s ago); rank 0 waits on its gradient");
  ASSERT_GE(a.findings_size(), 2);
  EXPECT_EQ(a.findings(0),
            "rank 1 on w2 (dp0 pp1 tp0) did not answer in 2s: process alive? last heartbeat "
            "0.4 s ago (Deadline Exceeded)");
  ASSERT_EQ(a.root_ranks_size(), 1);
  EXPECT_EQ(a.root_ranks(0), 1);
  ASSERT_EQ(a.ranks(0).waits_on_size(), 1);
  EXPECT_EQ(a.ranks(0).waits_on(0), 1);
}

// The example: rank 5 computes for 42 s; its next stage waits on its activation and the
// tensor-parallel partners of both wait in the all-reduce.
TEST(Analyse, ComputeRootIsToldApartAndChainsEndOnIt) {
  JobDiagnosis d;
  // pp=2 x tp=2 (x dp=2 for ranks 0-3): ranks 4,5 stage 0; ranks 6,7 stage 1.
  for (int r = 0; r < 4; ++r) {
    RankState& s = AddRank(d, r, absl::StrCat("dp0 pp", r / 2, " tp", r % 2));
    InCollective(s, 9, 8812, r == 0 ? 3 : r - 1, 30.0);  // dp ring over ranks 0-3 waiting on 5
  }
  RankState& r4 = AddRank(d, 4, "dp1 pp0 tp0");
  InCollective(r4, 3, 17, 5, 41.0);  // tp group of stage 0 waits on rank 5
  RankState& r5 = AddRank(d, 5, "dp1 pp0 tp1");
  Action(r5, FlightEntry::FORWARD, 120, 7, 42.0);
  for (int r = 6; r < 8; ++r) {
    RankState& s = AddRank(d, r, absl::StrCat("dp1 pp1 tp", r - 6));
    Action(s, FlightEntry::FORWARD, 120, 7, 41.5);
    Message(s, FlightEntry::RECV, ACTIVATION, r - 2, 120, 7, 41.5);
  }
  // Rank 6 receives from rank 4, which waits on rank 5; rank 7 from rank 5; ranks 0-3 in a
  // ring that rank 3 closes onto rank 2 ... and rank 0 onto rank 3: a cycle among themselves.
  const JobDiagnosis a = Analyse(d);
  EXPECT_EQ(a.summary(),
            "root: rank 5 (w6, dp1 pp0 tp1) is in F of micro-batch 7, step 120, for 42.0 s "
            "(compute, not communication); rank 4 waits in all-reduce sum of 1000 floats (group "
            "3 seq 17); rank 7 waits on its activation; rank 6 waits on those")
      << Findings(a);
  EXPECT_TRUE(a.ranks(5).compute());
  EXPECT_TRUE(
      absl::StrContains(Findings(a), "ranks 0 -> 3 -> 2 -> 1 -> 0 wait on each other in a cycle"))
      << Findings(a);
}

// The diagnosis the coordinator runs when a rank times out: that rank's run already failed (it
// did not answer, or answered with its wait ended), and it counts as waiting on the rank it
// blamed; not as a rank that did not answer.
TEST(Analyse, ARankThatTimedOutWaitsOnTheRankItBlamed) {
  JobDiagnosis d;
  AddRank(d, 0, "dp0 pp0 tp0", /*answered=*/false);
  RankState& r1 = AddRank(d, 1, "dp0 pp1 tp0");
  Action(r1, FlightEntry::FORWARD, 3, 0, 4.1);
  DiagnosisOptions o;
  o.timed_out.push_back({0, {1}, "receiving gradient step=3 mb=0: nothing arrived within 4s"});
  const JobDiagnosis a = Analyse(d, o);
  EXPECT_EQ(a.summary(),
            "root: rank 1 (w2, dp0 pp1 tp0) is in F of micro-batch 0, step 3, for 4.1 s "
            "(compute, not communication); rank 0 timed out waiting on it")
      << Findings(a);
  EXPECT_FALSE(absl::StrContains(Findings(a), "did not answer")) << Findings(a);
  EXPECT_EQ(a.ranks(0).doing(),
            "timed out waiting on rank 1: receiving gradient step=3 mb=0: nothing arrived "
            "within 4s");
  ASSERT_EQ(a.root_ranks_size(), 1);
  EXPECT_EQ(a.root_ranks(0), 1);
  // A frozen rank the other timed out on is still the root, as not answering.
  JobDiagnosis frozen;
  AddRank(frozen, 0, "dp0 pp0 tp0");
  AddRank(frozen, 1, "dp0 pp1 tp0", /*answered=*/false);
  o.timed_out = {{0, {1}, "nothing arrived within 4s"}};
  EXPECT_EQ(Analyse(frozen, o).summary(),
            "root: rank 1 (w2, dp0 pp1 tp0) did not answer in 2s (process stopped or hung? last "
            "heartbeat 0.4 s ago); rank 0 timed out waiting on it");
}

// A rank that answers just after its run failed in a receive (a peer gave up on the collective
// first) is on the chain towards the rank it waited for, not a root "between operations".
TEST(Analyse, ARankWhoseRunFailedInAReceiveWaitsOnItsSender) {
  JobDiagnosis d;
  // World all-reduce ring 0 -> 1 -> 2 -> 3 -> 0, rank 3 frozen: rank 0 gave up on rank 3,
  // rank 1 timed out on rank 0, rank 2 still waits on rank 1.
  RankState& r0 = AddRank(d, 0, "dp0 pp0 tp0");
  InCollective(r0, 4, 12, 3, 4.0);
  for (FlightEntry& e : *r0.mutable_recorder()->mutable_entries()) {
    e.set_state(FlightEntry::FAILED);
    e.set_end_unix_ns(kNow);
  }
  AddRank(d, 1, "dp0 pp0 tp1", /*answered=*/false);
  InCollective(AddRank(d, 2, "dp0 pp1 tp0"), 4, 12, 1, 4.0);
  AddRank(d, 3, "dp0 pp1 tp1", /*answered=*/false);
  DiagnosisOptions o;
  o.timed_out.push_back({1, {0}, "nothing arrived within 4s"});
  const JobDiagnosis a = Analyse(d, o);
  EXPECT_EQ(a.ranks(0).doing(),
            "gave up waiting for rank 3's message of collective group 4 seq 12 after 4.0 s (its "
            "run failed)");
  EXPECT_TRUE(absl::StartsWith(a.summary(),
                               "root: rank 3 (w4, dp0 pp1 tp1) did not answer in 2s (process "
                               "stopped or hung? last heartbeat 0.4 s ago); rank 0 waits on it; "
                               "ranks 1, 2 wait on those"))
      << a.summary();
}

TEST(Analyse, CollectiveSequenceMismatchNamesBothSides) {
  JobDiagnosis d;
  InCollective(AddRank(d, 0, "dp0 pp0 tp0"), 7, 12, 1, 5.0);
  InCollective(AddRank(d, 1, "dp0 pp0 tp1"), 7, 13, 0, 5.0);
  const JobDiagnosis a = Analyse(d);
  EXPECT_TRUE(absl::StrContains(
      Findings(a),
      "sequence mismatch in collective group 7: rank 0 at seq 12 (all-reduce sum of 1000 "
      "floats); rank 1 at seq 13 (all-reduce sum of 1000 floats)"))
      << Findings(a);
}

TEST(Analyse, AReceiveWaitingForASendThatNeverStarted) {
  JobDiagnosis d;
  RankState& r0 = AddRank(d, 0, "dp0 pp0 tp0");
  Action(r0, FlightEntry::BACKWARD_INPUT, 5, 2, 3.0);
  Message(r0, FlightEntry::RECV, GRADIENT, 1, 5, 2, 3.0);
  RankState& r1 = AddRank(d, 1, "dp0 pp1 tp0");
  Message(r1, FlightEntry::SEND, GRADIENT, 0, 5, 1, 3.5, /*done=*/true);  // mb 1, not 2
  Action(r1, FlightEntry::FORWARD, 5, 3, 2.9);
  const JobDiagnosis a = Analyse(d);
  EXPECT_TRUE(absl::StrContains(
      Findings(a),
      "rank 0 waits for rank 1's gradient (step 5, micro-batch 2), which it has not sent: rank "
      "1 (w2, dp0 pp1 tp0) is in F of micro-batch 3, step 5, for 2.9 s"))
      << Findings(a);
  EXPECT_EQ(a.root_ranks_size(), 1);
}

TEST(Analyse, ASendThatDidNotArriveIsNamed) {
  JobDiagnosis d;
  RankState& r0 = AddRank(d, 0, "dp0 pp1 tp0");
  Message(r0, FlightEntry::RECV, ACTIVATION, 1, 5, 2, 3.0);
  RankState& r1 = AddRank(d, 1, "dp0 pp0 tp0");
  Message(r1, FlightEntry::SEND, ACTIVATION, 0, 5, 2, 3.5, /*done=*/true);
  const JobDiagnosis a = Analyse(d);
  EXPECT_TRUE(absl::StrContains(Findings(a), "sent 3.5 s ago but not received")) << Findings(a);
}

TEST(Analyse, KeepsTheNewestEntries) {
  JobDiagnosis d;
  RankState& r0 = AddRank(d, 0, "dp0 pp0 tp0");
  for (int i = 0; i < 100; ++i)
    Action(r0, FlightEntry::FORWARD, i, 0, 1.0).set_state(FlightEntry::DONE);
  DiagnosisOptions o;
  o.keep_entries = 10;
  const JobDiagnosis a = Analyse(d, o);
  ASSERT_EQ(a.ranks(0).recorder().entries_size(), 10);
  EXPECT_EQ(a.ranks(0).recorder().entries(0).step(), 90);
}

}  // namespace
}  // namespace dtrain::coordinator
