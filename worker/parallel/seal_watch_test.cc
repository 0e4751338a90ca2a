// FirstPeerLeft over real transports: in the run, failed, left cleanly.
#include "worker/parallel/seal_watch.h"

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/cluster.h"

namespace dtrain::parallel {
namespace {

using ::dtrain::comm::testing::Cluster;
using ::dtrain::comm::testing::TransportKind;

// A message from `from` to rank 0: the stream a run that stepped has (a failure or a GOODBYE
// travels on it).
void SendToRankZero(Cluster& cluster, int from) {
  std::vector<float> x(4, 1.0f);
  ASSERT_TRUE(comm::Send(*cluster.transport(from), 0, comm::MessageKey::Activation(1, 0),
                         comm::TensorMeta::F32(4), comm::AsBytes(x),
                         absl::Now() + absl::Seconds(10))
                  .ok());
}

// Who rank 0 sees leave within 10 s (the GOODBYE arrives on the peer's stream).
std::string LeftWithin(comm::Transport& t, const std::vector<int>& peers) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string left = FirstPeerLeft(t, peers);
  while (left.empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
    left = FirstPeerLeft(t, peers);
  }
  return left;
}

class SealWatchTest : public ::testing::TestWithParam<TransportKind> {};

TEST_P(SealWatchTest, NobodyLeftWhileEveryPeerIsInTheRun) {
  auto cluster = Cluster::Create(GetParam(), 3);
  if (comm::testing::IsGrpc(GetParam())) SendToRankZero(*cluster, 1);
  EXPECT_EQ(FirstPeerLeft(*cluster->transport(0), {1, 2}), "");
  EXPECT_EQ(FirstPeerLeft(*cluster->transport(0), {}), "");  // one rank: nobody to watch
}

// A failed peer is comm::WatchPeers' (the seal fails at once), not a leave.
TEST_P(SealWatchTest, AFailedPeerDidNotLeave) {
  auto cluster = Cluster::Create(GetParam(), 3);
  if (comm::testing::IsGrpc(GetParam())) SendToRankZero(*cluster, 2);
  cluster->Kill(2);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (comm::WatchPeers(*cluster->transport(0), {1, 2}).ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_FALSE(comm::WatchPeers(*cluster->transport(0), {1, 2}).ok());
  EXPECT_EQ(FirstPeerLeft(*cluster->transport(0), {1, 2}), "");
}

// The gap this closes: a peer that closed its stream cleanly keeps an OK status (it did not
// fail), yet it will publish nothing more.
TEST_P(SealWatchTest, APeerThatLeftCleanlyIsNamed) {
  auto cluster = Cluster::Create(GetParam(), 3);
  if (!comm::testing::IsGrpc(GetParam())) GTEST_SKIP() << "in-process ranks do not leave";
  SendToRankZero(*cluster, 1);
  cluster->grpc(1)->Shutdown(absl::Seconds(5));
  EXPECT_EQ(LeftWithin(*cluster->transport(0), {1, 2}), cluster->transport(0)->PeerName(1));
  EXPECT_TRUE(comm::WatchPeers(*cluster->transport(0), {1, 2}).ok());  // what it missed
}

INSTANTIATE_TEST_SUITE_P(Transports, SealWatchTest,
                         ::testing::Values(TransportKind::kInproc, TransportKind::kGrpc,
                                           TransportKind::kShm),
                         [](const auto& info) { return comm::testing::KindName(info.param); });

}  // namespace
}  // namespace dtrain::parallel
