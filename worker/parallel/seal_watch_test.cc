// WatchSealPeers over real transports: in the run, failed, left cleanly, and this rank stopped.
#include "worker/parallel/seal_watch.h"

#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/cluster.h"

namespace dtrain::parallel {
namespace {

using ::dtrain::comm::testing::Cluster;
using ::dtrain::comm::testing::TransportKind;
using ::testing::HasSubstr;

// A message from `from` to rank 0: the stream a run that stepped has (a failure or a GOODBYE
// travels on it).
void SendToRankZero(Cluster& cluster, int from) {
  std::vector<float> x(4, 1.0f);
  ASSERT_TRUE(comm::Send(*cluster.transport(from), 0, comm::MessageKey::Activation(1, 0),
                         comm::TensorMeta::F32(4), comm::AsBytes(x),
                         absl::Now() + absl::Seconds(10))
                  .ok());
}

// What rank 0 sees within 10 s (the leave's GOODBYE arrives on the peer's stream).
absl::Status SeenWithin(comm::Transport& t, const std::vector<int>& peers) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::Status s = WatchSealPeers(t, peers);
  while (s.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
    s = WatchSealPeers(t, peers);
  }
  return s;
}

class SealWatchTest : public ::testing::TestWithParam<TransportKind> {};

TEST_P(SealWatchTest, EveryPeerInTheRunIsOk) {
  auto cluster = Cluster::Create(GetParam(), 3);
  EXPECT_TRUE(WatchSealPeers(*cluster->transport(0), {1, 2}).ok());
  EXPECT_TRUE(WatchSealPeers(*cluster->transport(0), {}).ok());  // one rank: nobody to watch
}

TEST_P(SealWatchTest, AFailedPeerIsItsError) {
  auto cluster = Cluster::Create(GetParam(), 3);
  if (comm::testing::IsGrpc(GetParam())) SendToRankZero(*cluster, 2);
  cluster->Kill(2);
  const absl::Status s = SeenWithin(*cluster->transport(0), {1, 2});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), absl::StatusCode::kCancelled) << s;  // failed: the seal fails now
}

// The gap this closes: a peer that closed its stream cleanly (and may have died since) no longer
// counts as in the run.
TEST_P(SealWatchTest, APeerThatLeftCleanlyIsCancelledNamingIt) {
  auto cluster = Cluster::Create(GetParam(), 3);
  if (!comm::testing::IsGrpc(GetParam())) GTEST_SKIP() << "in-process ranks do not leave";
  SendToRankZero(*cluster, 1);
  cluster->grpc(1)->Shutdown(absl::Seconds(5));
  const absl::Status s = SeenWithin(*cluster->transport(0), {1, 2});
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(s.message(), HasSubstr("left the run"));
  EXPECT_THAT(s.message(), HasSubstr(cluster->transport(0)->PeerName(1)));
}

TEST_P(SealWatchTest, ThisRankStoppedIsCancelled) {
  auto cluster = Cluster::Create(GetParam(), 2);
  if (!comm::testing::IsGrpc(GetParam())) GTEST_SKIP() << "in-process ranks are not shut down";
  cluster->grpc(0)->Shutdown(absl::ZeroDuration());
  EXPECT_EQ(WatchSealPeers(*cluster->transport(0), {1}).code(), absl::StatusCode::kCancelled);
}

INSTANTIATE_TEST_SUITE_P(Transports, SealWatchTest,
                         ::testing::Values(TransportKind::kInproc, TransportKind::kGrpc,
                                           TransportKind::kShm),
                         [](const auto& info) { return comm::testing::KindName(info.param); });

}  // namespace
}  // namespace dtrain::parallel
