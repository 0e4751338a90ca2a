#include "coordinator/policy/failure_report.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// pp=2 x tp=2 on w1..w4, in (dp, pp, tp) order.
Placement FourRanks() {
  Placement p;
  for (int i = 0; i < 4; ++i) {
    RankAssignment* r = p.add_ranks();
    r->set_pp_rank(i / 2);
    r->set_tp_rank(i % 2);
    r->set_worker_id(absl::StrCat("w", i + 1));
  }
  return p;
}

RankFailure Peer(int rank, std::vector<std::string> suspects, std::string error) {
  return {RankFailure::kPeer, rank, absl::StrCat("w", rank + 1), std::move(error),
          std::move(suspects)};
}

TEST(RootCauseReason, StoppedWorkerIsNamedFirstEvenWhenItsPeersReportedEarlier) {
  const std::vector<RankFailure> failures = {
      Peer(2, {"w4"}, "receiving collective group=16777217 seq=641: stream broke"),
      Peer(0, {"w3"}, "receiving activation: stream broke"),
      {RankFailure::kStopped, 3, "w4", "worker stopped by SIGTERM after step 20", {}},
  };
  const std::string reason = RootCauseReason(FourRanks(), failures, {});
  EXPECT_THAT(reason, StartsWith("worker w4 (dp0 pp1 tp1) stopped: worker stopped by SIGTERM "
                                 "after step 20\n  then worker w3 (dp0 pp1 tp0) failed: "
                                 "receiving collective"));
}

TEST(RootCauseReason, LostBeatsLocalBeatsPeer) {
  const std::vector<RankFailure> failures = {
      Peer(0, {"w2"}, "x"),
      {RankFailure::kLocal, 1, "w2", "dataset d cannot be read", {}},
      {RankFailure::kLost, 2, "w3", "no heartbeat for 10.0s", {}},
  };
  EXPECT_THAT(RootCauseReason(FourRanks(), failures, {}),
              StartsWith("worker w3 (dp0 pp1 tp0) lost: no heartbeat for 10.0s\n  then worker w1"));
}

TEST(RootCauseReason, SilentSuspectIsNamedWithItsAccusersAndHeartbeat) {
  const std::vector<RankFailure> failures = {
      Peer(0, {"w2"}, "stream to rank 1 broke"), Peer(2, {"w2", "w4"}, "stream broke"),
      Peer(3, {"w3"}, "stream broke"),  // w3 reported: it is a victim, not the cause
  };
  const std::string reason =
      RootCauseReason(FourRanks(), failures, {{"w2", absl::Milliseconds(4200)}});
  EXPECT_THAT(reason, StartsWith("worker w2 (dp0 pp0 tp1) stopped answering: its peers w1, w3 "
                                 "lost their connection to it"));
  EXPECT_THAT(reason, HasSubstr("last heartbeat was 4.2s ago"));
  EXPECT_THAT(reason, HasSubstr("\n  then worker w1 (dp0 pp0 tp0) failed: stream to rank 1 broke"));
}

TEST(RootCauseReason, ATimeoutDoesNotSayTheSuspectIsGone) {
  RankFailure timed_out = Peer(0, {"w2"}, "receiving activation from rank 1: deadline exceeded");
  timed_out.error_code = static_cast<int>(absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(RootCauseReason(FourRanks(), {timed_out}, {}),
              StartsWith("worker w2 (dp0 pp0 tp1) stopped answering: its peer w1 timed out "
                         "waiting for it and it reported no error (process stopped, hung, or "
                         "busy past the timeout?)"));
}

TEST(RootCauseReason, NoSuspectFallsBackToTheFirstReport) {
  const std::vector<RankFailure> failures = {Peer(1, {}, "first"), Peer(0, {}, "second")};
  EXPECT_EQ(RootCauseReason(FourRanks(), failures, {}),
            "worker w2 (dp0 pp0 tp1) failed: first\n  then worker w1 (dp0 pp0 tp0) failed: second");
}

// A partition: two live workers blaming each other across one link. Neither is the common
// factor, so neither is named (and so neither is excluded after two such failures).
TEST(FindRootCause, TwoWorkersBlamingEachOtherIsTheLinkNotAWorker) {
  const std::vector<RankFailure> failures = {
      Peer(1, {"w1"}, "receiving activation from rank 0: stream broke"),
      Peer(0, {"w2"}, "sending activation to rank 1: stream broke"),
  };
  const RootCause cause = FindRootCause(FourRanks(), failures, {});
  EXPECT_EQ(cause.worker_id, "");
  EXPECT_TRUE(cause.curable);
  EXPECT_THAT(cause.reason, StartsWith("the link between worker w1 (dp0 pp0 tp0) and worker w2 "
                                       "(dp0 pp0 tp1) failed: each side lost its connection to "
                                       "the other and reported it, so neither worker is the "
                                       "cause (a network partition?)\n  then worker w2"));
}

TEST(FindRootCause, ABlameNotReturnedStillNamesTheFirstReport) {
  // w2 blames w1, but w1 blames w3: not one link; w1 is named as before.
  const std::vector<RankFailure> failures = {Peer(0, {"w3"}, "a"), Peer(1, {"w1"}, "b"),
                                             Peer(2, {"w1"}, "c")};
  EXPECT_EQ(FindRootCause(FourRanks(), failures, {}).worker_id, "w1");
}

TEST(RootCauseReason, OneFailureHasNoDetailLine) {
  EXPECT_EQ(RootCauseReason(FourRanks(), {{RankFailure::kLocal, 0, "w1", "disk full", {}}}, {}),
            "worker w1 (dp0 pp0 tp0) failed: disk full");
}

}  // namespace
}  // namespace dtrain::coordinator
