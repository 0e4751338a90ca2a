#include "worker/comm/flight_recorder.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/comm/collectives/allreduce_ring.h"
#include "worker/comm/observed_transport.h"
#include "worker/comm/testing/cluster.h"

namespace dtrain::comm {
namespace {

TEST(FlightRecorder, EmptyHasNoRecords) {
  FlightRecorder r;
  EXPECT_EQ(r.capacity(), FlightRecorder::kDefaultCapacity);
  EXPECT_TRUE(r.Snapshot().empty());
  EXPECT_EQ(r.recorded(), 0u);
}

TEST(FlightRecorder, BeginThenEndGivesStateAndTimes) {
  FlightRecorder r;
  const int64_t before = absl::GetCurrentTimeNanos();
  const uint64_t f = r.Begin(FlightRecord::Action(FlightOp::kForward, 120, 7, 1));
  const uint64_t b = r.Begin(FlightRecord::Action(FlightOp::kBackwardInput, 120, 6, 0));
  r.End(f, true);
  r.End(b, false);
  r.Instant(FlightRecord::Message(FlightOp::kSend, 3, MessageKey::Activation(120, 7, 2), 4096));
  const std::vector<FlightRecord> s = r.Snapshot();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].id, 1u);
  EXPECT_EQ(s[0].op, FlightOp::kForward);
  EXPECT_EQ(s[0].state, FlightState::kDone);
  EXPECT_EQ(s[0].step, 120);
  EXPECT_EQ(s[0].micro_batch, 7);
  EXPECT_EQ(s[0].virtual_stage, 1);
  EXPECT_GE(s[0].start_ns, before);
  EXPECT_GE(s[0].end_ns, s[0].start_ns);
  EXPECT_EQ(s[1].state, FlightState::kFailed);
  EXPECT_EQ(s[2].op, FlightOp::kSend);
  EXPECT_EQ(s[2].state, FlightState::kDone);
  EXPECT_EQ(s[2].peer, 3);
  EXPECT_EQ(s[2].kind, MessageKind::kActivation);
  EXPECT_EQ(s[2].virtual_stage, 2);
  EXPECT_EQ(s[2].bytes, 4096);
  EXPECT_EQ(s[2].start_ns, s[2].end_ns);
}

TEST(FlightRecorder, StartedStaysOpenUntilEnded) {
  FlightRecorder r;
  r.Begin(FlightRecord::Message(FlightOp::kRecv, 0, MessageKey::Gradient(5, 2), 64));
  const std::vector<FlightRecord> s = r.Snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].state, FlightState::kStarted);
  EXPECT_EQ(s[0].end_ns, 0);
  EXPECT_EQ(s[0].kind, MessageKind::kGradient);
}

TEST(FlightRecorder, FullRingKeepsTheNewestOldestFirst) {
  FlightRecorder r(4);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(r.Begin(FlightRecord::Checkpoint(i, "snapshot")));
  const std::vector<FlightRecord> s = r.Snapshot();
  ASSERT_EQ(s.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s[i].id, 7u + i);
    EXPECT_EQ(s[i].step, 6 + i);
    EXPECT_STREQ(s[i].what, "snapshot");
  }
  EXPECT_EQ(r.recorded(), 10u);
  // Ending an overwritten record changes nothing (its slot holds record 9 now).
  r.End(ids[4], false);
  EXPECT_EQ(r.Snapshot()[2].state, FlightState::kStarted);
}

TEST(FlightRecorder, LongTextIsTruncated) {
  FlightRecord c = FlightRecord::Collective(7, 8812, std::string(100, 'x'));
  EXPECT_EQ(std::string(c.what), std::string(sizeof(c.what) - 1, 'x'));
  EXPECT_EQ(c.group, 7);
  EXPECT_EQ(c.seq, 8812);
}

TEST(FlightScope, EndsFailedWithoutFinishAndNullRecordsNothing) {
  FlightRecorder r;
  { FlightScope scope(&r, FlightRecord::Action(FlightOp::kBackwardWeight, 1, 0, 0)); }
  {
    FlightScope scope(&r, FlightRecord::Action(FlightOp::kForward, 1, 1, 0));
    EXPECT_TRUE(scope.Finish(absl::OkStatus()).ok());
  }
  { FlightScope scope(nullptr, FlightRecord::Action(FlightOp::kForward, 1, 2, 0)); }
  const std::vector<FlightRecord> s = r.Snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].state, FlightState::kFailed);
  EXPECT_EQ(s[1].state, FlightState::kDone);
}

// An all-reduce over an ObservedTransport with a recorder: one collective record per rank, with
// its group and sequence number, and every message it sent and received, with its peer.
TEST(FlightRecorder, ObservedTransportRecordsCollectivesSendsAndReceives) {
  auto cluster = testing::Cluster::Create(testing::TransportKind::kInproc, 2);
  FlightRecorder recorders[2];
  std::vector<std::unique_ptr<ObservedTransport>> observed;
  for (int r = 0; r < 2; ++r) {
    observed.push_back(
        std::make_unique<ObservedTransport>(cluster->transport(r), nullptr, &recorders[r]));
  }
  const std::vector<absl::Status> results = cluster->Run([&](int rank) -> absl::Status {
    absl::StatusOr<Group> g = Group::Create(observed[rank].get(), {0, 1}, /*id=*/5);
    if (!g.ok()) return g.status();
    std::vector<float> data(10, 1.0f);
    return AllReduce(*g, absl::MakeSpan(data), ReduceOp::kSum);
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(results[rank].ok()) << results[rank];
    int collectives = 0, sends = 0, recvs = 0;
    for (const FlightRecord& f : recorders[rank].Snapshot()) {
      EXPECT_EQ(f.state, FlightState::kDone) << "op " << static_cast<int>(f.op);
      EXPECT_EQ(f.group, 5);
      EXPECT_EQ(f.seq, 0);
      if (f.op == FlightOp::kCollective) {
        ++collectives;
        EXPECT_EQ(std::string(f.what), "all-reduce sum of 10 floats");
      }
      if (f.op == FlightOp::kSend) ++sends;
      if (f.op == FlightOp::kRecv) ++recvs;
      if (f.op != FlightOp::kCollective) {
        EXPECT_EQ(f.peer, 1 - rank);
      }
    }
    EXPECT_EQ(collectives, 1);
    EXPECT_GT(sends, 0);
    EXPECT_EQ(sends, recvs);
  }
}

}  // namespace
}  // namespace dtrain::comm
