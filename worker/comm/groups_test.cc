#include "worker/comm/groups.h"

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::comm {
namespace {

using ::testing::ElementsAre;

ParallelLayout Layout(int dp, int pp, int tp) {
  ParallelLayout layout;
  layout.set_dp(dp);
  layout.set_pp(pp);
  layout.set_tp(tp);
  return layout;
}

int Size(const ParallelLayout& l) { return l.dp() * l.pp() * l.tp(); }

TEST(Groups, RankOutsideTheLayoutIsInvalidArgumentNamingEveryFactor) {
  absl::StatusOr<GroupSpec> g = TensorParallelGroup(Layout(2, 3, 4), 24);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(), "rank 24 outside dp=2 pp=3 tp=4 (24 ranks)");
  EXPECT_EQ(DataParallelGroup(Layout(2, 3, 4), -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Groups, LayoutOfTwoToThe24RanksIsInvalidArgument) {
  // Group ids keep a group's index in 24 bits.
  absl::StatusOr<GroupSpec> g = DataParallelGroup(Layout(1 << 12, 1 << 6, 1 << 6), 0);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("more than 2^24 ranks"), std::string::npos) << g.status();
}

TEST(Groups, UnsetFactorsCountAsOneAsInThePlan) {
  ParallelLayout pipeline_only;
  pipeline_only.set_pp(2);  // dp and tp unset
  EXPECT_THAT(TensorParallelGroup(pipeline_only, 1)->ranks, ElementsAre(1));
  EXPECT_THAT(DataParallelGroup(pipeline_only, 1)->ranks, ElementsAre(1));
  EXPECT_EQ(PipelineNeighboursOf(pipeline_only, 0, false)->next, 1);
}

TEST(Groups, TensorParallelGroupIsConsecutiveRanksOfOneStage) {
  ParallelLayout l = Layout(2, 2, 4);
  EXPECT_THAT(TensorParallelGroup(l, 6)->ranks, ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(TensorParallelGroup(l, 9)->ranks, ElementsAre(8, 9, 10, 11));
}

TEST(Groups, DataParallelGroupIsTheSameStageAndShardInEveryReplica) {
  ParallelLayout l = Layout(3, 2, 2);  // replicas of 4 ranks
  EXPECT_THAT(DataParallelGroup(l, 5)->ranks, ElementsAre(1, 5, 9));
  EXPECT_THAT(DataParallelGroup(l, 2)->ranks, ElementsAre(2, 6, 10));
}

TEST(Groups, EveryRankIsInExactlyOneGroupOfEachKindAndAllMembersAgree) {
  ParallelLayout l = Layout(2, 3, 2);
  for (auto group_of : {&TensorParallelGroup, &DataParallelGroup}) {
    std::set<int32_t> ids;
    for (int rank = 0; rank < Size(l); ++rank) {
      GroupSpec g = *group_of(l, rank);
      ids.insert(g.id);
      int count = 0;
      for (int member : g.ranks) {
        count += member == rank;
        GroupSpec seen_by_member = *group_of(l, member);
        EXPECT_EQ(seen_by_member.id, g.id);
        EXPECT_EQ(seen_by_member.ranks, g.ranks);
      }
      EXPECT_EQ(count, 1);
    }
    EXPECT_EQ(ids.size(), static_cast<size_t>(Size(l) / (*group_of(l, 0)).ranks.size()));
  }
}

TEST(Groups, GroupIdsDifferAcrossKinds) {
  ParallelLayout l = Layout(2, 2, 2);
  std::set<int32_t> ids;
  for (int rank = 0; rank < Size(l); ++rank) {
    ids.insert(TensorParallelGroup(l, rank)->id);
    ids.insert(DataParallelGroup(l, rank)->id);
    auto tied = *TiedEmbeddingGroup(l, rank);
    if (tied) ids.insert(tied->id);
  }
  EXPECT_EQ(ids.size(), 4u + 4u + 4u);  // 4 tp, 4 dp, 4 tied groups
}

TEST(Groups, TiedEmbeddingGroupPairsFirstAndLastStage) {
  ParallelLayout l = Layout(2, 4, 2);  // 8 ranks per replica
  EXPECT_THAT((*TiedEmbeddingGroup(l, 1))->ranks, ElementsAre(1, 7));
  EXPECT_THAT((*TiedEmbeddingGroup(l, 7))->ranks, ElementsAre(1, 7));
  EXPECT_THAT((*TiedEmbeddingGroup(l, 8))->ranks, ElementsAre(8, 14));
  EXPECT_FALSE((*TiedEmbeddingGroup(l, 3)).has_value());  // a middle stage
  EXPECT_EQ((*TiedEmbeddingGroup(l, 1))->id, (*TiedEmbeddingGroup(l, 7))->id);
}

TEST(Groups, TiedEmbeddingGroupOfOneStageIsTheRankAlone) {
  ParallelLayout l = Layout(2, 1, 2);
  EXPECT_THAT((*TiedEmbeddingGroup(l, 3))->ranks, ElementsAre(3));
}

TEST(Groups, PipelineNeighboursAreTheAdjacentStagesOfTheSameReplicaAndShard) {
  ParallelLayout l = Layout(2, 3, 2);  // stages of replica 1: ranks 6-7, 8-9, 10-11
  PipelineNeighbours first = *PipelineNeighboursOf(l, 7, false);
  EXPECT_EQ(first.prev, -1);
  EXPECT_EQ(first.next, 9);
  PipelineNeighbours middle = *PipelineNeighboursOf(l, 8, false);
  EXPECT_EQ(middle.prev, 6);
  EXPECT_EQ(middle.next, 10);
  PipelineNeighbours last = *PipelineNeighboursOf(l, 11, false);
  EXPECT_EQ(last.prev, 9);
  EXPECT_EQ(last.next, -1);
}

TEST(Groups, InterleavedPipelineWrapsFromLastStageToFirst) {
  ParallelLayout l = Layout(1, 4, 1);
  EXPECT_EQ(PipelineNeighboursOf(l, 3, true)->next, 0);
  EXPECT_EQ(PipelineNeighboursOf(l, 0, true)->prev, 3);
  ParallelLayout single = Layout(2, 1, 1);
  EXPECT_EQ(PipelineNeighboursOf(single, 1, true)->prev, -1);
  EXPECT_EQ(PipelineNeighboursOf(single, 1, true)->next, -1);
}

}  // namespace
}  // namespace dtrain::comm
