#include "plan/ranks.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::plan {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

ParallelLayout Layout(int dp, int pp, int tp) {
  ParallelLayout layout;
  layout.set_dp(dp);
  layout.set_pp(pp);
  layout.set_tp(tp);
  return layout;
}

// The whole placement of `layout` with the host label of rank r at hosts[r].
Placement OnHosts(const ParallelLayout& layout, const std::vector<std::string>& hosts) {
  Placement placement;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    RankAssignment a = RankCoordinates(layout, r);
    a.set_host_label(hosts[r]);
    *placement.add_ranks() = a;
  }
  return placement;
}

TEST(DpHostIndex, NumbersHostsInOrderOfTheirFirstMember) {
  const ParallelLayout dp4 = Layout(4, 1, 1);
  const Placement alternating = OnHosts(dp4, {"b", "a", "b", "a"});
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(DpHostIndex(alternating, dp4, rank), ElementsAre(0, 1, 0, 1)) << rank;
  }
  EXPECT_THAT(DpHostIndex(OnHosts(dp4, {"x", "x", "y", "z"}), dp4, 3), ElementsAre(0, 0, 1, 2));
}

TEST(DpHostIndex, IsEmptyWhenTheFlatRingIsTheChoice) {
  const ParallelLayout dp4 = Layout(4, 1, 1);
  EXPECT_THAT(DpHostIndex(OnHosts(dp4, {"a", "a", "a", "a"}), dp4, 0), IsEmpty());  // one host
  EXPECT_THAT(DpHostIndex(OnHosts(dp4, {"a", "b", "c", "d"}), dp4, 0), IsEmpty());  // 1 per host
  EXPECT_THAT(DpHostIndex(OnHosts(dp4, {"a", "", "a", "b"}), dp4, 0), IsEmpty());   // unlabelled
  const ParallelLayout one = Layout(1, 2, 1);
  EXPECT_THAT(DpHostIndex(OnHosts(one, {"a", "b"}), one, 0), IsEmpty());  // no dp group
  // A group above the bound runs the flat ring, whatever its hosts.
  const ParallelLayout big = Layout(kMaxDpHostIndex + 1, 1, 1);
  std::vector<std::string> two_hosts;
  for (int r = 0; r <= kMaxDpHostIndex; ++r) two_hosts.push_back(r % 2 ? "a" : "b");
  EXPECT_THAT(DpHostIndex(OnHosts(big, two_hosts), big, 0), IsEmpty());
  const ParallelLayout at_bound = Layout(kMaxDpHostIndex, 1, 1);
  two_hosts.pop_back();
  EXPECT_EQ(DpHostIndex(OnHosts(at_bound, two_hosts), at_bound, 5).size(),
            static_cast<size_t>(kMaxDpHostIndex));
}

// Each dp group of a (dp, pp, tp) job has its own hosts: rank (d, p, t)'s list reads the ranks
// (0..dp-1, p, t) only.
TEST(DpHostIndex, ReadsTheRanksOwnDpGroup) {
  const ParallelLayout layout = Layout(4, 2, 1);  // rank = 2 * d + p
  // pp0's group (ranks 0, 2, 4, 6) on h h g g; pp1's (1, 3, 5, 7) on one host each.
  const Placement placement = OnHosts(layout, {"h", "p", "h", "q", "g", "r", "g", "s"});
  EXPECT_THAT(DpHostIndex(placement, layout, 4), ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(DpHostIndex(placement, layout, 5), IsEmpty());
}

// dp=4 on hosts a b a b: the per-host rings are {0, 2} and {1, 3}, the leaders' ring {0, 1}.
// The flat rule gives rank r its dp ring (= the job's ring here) r -+ 1; the hierarchy adds
// the other member of its host and, on a leader, the other leader.
TEST(PeerRanks, AddTheHierarchicalAllReducesRings) {
  const ParallelLayout dp4 = Layout(4, 1, 1);
  const std::vector<int> hosts = {0, 1, 0, 1};
  EXPECT_THAT(PeerRanks(dp4, 0), ElementsAre(1, 3));
  EXPECT_THAT(PeerRanks(dp4, 0, hosts), ElementsAre(1, 2, 3));
  EXPECT_THAT(PeerRanks(dp4, 1, hosts), ElementsAre(0, 2, 3));
  EXPECT_THAT(PeerRanks(dp4, 2, hosts), ElementsAre(0, 1, 3));  // not a leader
  EXPECT_THAT(PeerRanks(dp4, 3, hosts), ElementsAre(0, 1, 2));
  // dp=8 on 4 hosts of 2 members a b c d a b c d, pp=2 (rank = 2 * d + p): rank 2 is dp1 pp0,
  // leader of host b: its host's other member dp5 (rank 10), leaders dp0 and dp2 (ranks 0, 4),
  // beside its dp ring dp0, dp2 and the job's ring 1, 3.
  const ParallelLayout dp8 = Layout(8, 2, 1);
  const std::vector<int> four = {0, 1, 2, 3, 0, 1, 2, 3};
  EXPECT_THAT(PeerRanks(dp8, 2), ElementsAre(0, 1, 3, 4));
  EXPECT_THAT(PeerRanks(dp8, 2, four), ElementsAre(0, 1, 3, 4, 10));
  // dp3 pp1 (rank 7) leads host d: beside its dp ring dp2, dp4 (ranks 5, 9) and the job's ring
  // 6, 8, its leaders' ring neighbours dp2 and dp0 (ranks 5, 1) and its host's other member dp7
  // (rank 15).
  EXPECT_THAT(PeerRanks(dp8, 7, four), ElementsAre(1, 5, 6, 8, 9, 15));
}

// The rule stays symmetric (q is a peer of r exactly when r is one of q's) and small for every
// rank of layouts with their dp groups on several hosts.
TEST(PeerRanks, WithHostsStaySymmetricAndAtMostTwelve) {
  const std::vector<std::vector<int>> host_lists = {
      {0, 1, 0, 1}, {0, 0, 1, 1}, {0, 1, 2, 0}, {0, 0, 0, 1}, {0, 1, 1, 2, 2, 0}};
  for (const std::vector<int>& hosts : host_lists) {
    const int dp = static_cast<int>(hosts.size());
    for (int pp : {1, 2, 3}) {
      for (int tp : {1, 2}) {
        const ParallelLayout layout = Layout(dp, pp, tp);
        const int n = dp * pp * tp;
        for (int rank = 0; rank < n; ++rank) {
          SCOPED_TRACE(absl::StrCat(dp, "x", pp, "x", tp, " rank ", rank));
          const std::vector<int> peers = PeerRanks(layout, rank, hosts);
          EXPECT_LE(peers.size(), 12u);
          EXPECT_TRUE(std::is_sorted(peers.begin(), peers.end()));
          for (int q : peers) {
            const std::vector<int> back = PeerRanks(layout, q, hosts);
            EXPECT_TRUE(std::find(back.begin(), back.end(), rank) != back.end())
                << "not symmetric with " << q;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::plan
