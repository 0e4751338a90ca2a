#include "coordinator/rank_assignment.h"

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/rank_plan.h"
#include "plan/ranks.h"

namespace dtrain::coordinator {
namespace {

using ::testing::ElementsAreArray;

// A job of dp x pp x tp ranks placed one rank per worker, as the coordinator holds it: the whole
// placement, stage_layers given (pp entries), every rank with its layers and memory; with
// `ranks_per_host` > 0, ranks r on host r / ranks_per_host (RankAssignment.host_label).
JobAssignment Whole(int dp, int pp, int tp, int ranks_per_host = 0) {
  JobAssignment job;
  job.set_job_id("job-000042");
  job.set_job_uid("0123456789abcdef");
  job.set_attempt(1);
  JobSpec& spec = *job.mutable_spec();
  spec.set_name("scale");
  spec.set_steps(1000);
  spec.set_batch_size(4 * dp);
  ModelConfig& model = *spec.mutable_model();
  model.set_vocab_size(256);
  model.set_context(64);
  model.set_n_layer(2 * pp);
  model.set_n_head(8);
  model.set_n_embd(64);
  spec.set_dataset("/data/scale.bin");
  spec.mutable_checkpoint()->set_dir("/ckpt");
  ParallelLayout& layout = *spec.mutable_parallel();
  layout.set_dp(dp);
  layout.set_pp(pp);
  layout.set_tp(tp);
  layout.set_schedule("1f1b");
  for (int s = 0; s < pp; ++s) layout.add_stage_layers(2);
  Placement& placement = *job.mutable_placement();
  placement.set_peer_secret(std::string(16, 'k'));
  for (int r = 0; r < dp * pp * tp; ++r) {
    RankAssignment a = RankCoordinates(layout, r);
    // Fixed-width names and addresses, so only the number of entries can change the size.
    a.set_worker_id(absl::StrFormat("worker-%05d", r));
    a.set_worker_address(absl::StrFormat("10.%03d.%03d.1:7071", r / 256, r % 256));
    a.set_first_layer(2 * a.pp_rank());
    a.set_num_layers(2);
    a.set_memory_bytes(int64_t{3} << 30);
    if (ranks_per_host > 0) a.set_host_label(absl::StrFormat("host-%05d", r / ranks_per_host));
    *placement.add_ranks() = a;
  }
  for (int s = 0; s < pp; ++s) placement.add_stage_costs(2.0);
  const absl::Status planned = AttachJobPlan(&job);  // what Place keeps with the whole
  EXPECT_TRUE(planned.ok()) << planned;
  return job;
}

TEST(AssignmentForRank, HoldsTheRankItsPeersAndTheSecretInRankOrder) {
  const JobAssignment whole = Whole(2, 4, 2);  // 16 ranks
  const int rank = 5;                          // dp0 pp2 tp1
  const JobAssignment part = AssignmentForRank(whole, rank);
  EXPECT_EQ(part.job_id(), "job-000042");
  EXPECT_EQ(part.job_uid(), "0123456789abcdef");
  EXPECT_EQ(part.attempt(), 1);
  EXPECT_EQ(part.rank().SerializeAsString(), whole.placement().ranks(rank).SerializeAsString());
  EXPECT_EQ(part.placement().peer_secret(), whole.placement().peer_secret());
  EXPECT_TRUE(part.placement().stage_costs().empty());
  EXPECT_TRUE(part.spec().parallel().stage_layers().empty());
  EXPECT_EQ(part.spec().parallel().dp(), 2);
  // The rank's part of the plan, never the whole plan.
  EXPECT_FALSE(part.has_job_plan());
  EXPECT_EQ(part.rank_plan().SerializeAsString(),
            plan::RankPlanOf(whole.job_plan(), rank).SerializeAsString());
  EXPECT_EQ(part.rank_plan().schedule(), SCHEDULE_1F1B);
  ASSERT_EQ(part.rank_plan().chunks_size(), 1);
  EXPECT_EQ(part.rank_plan().chunks(0).first_layer(), 4);  // pp2 of 2-layer stages

  std::vector<int> listed;
  for (const RankAssignment& r : part.placement().ranks()) {
    const int index = RankIndex(part.spec().parallel(), r);
    listed.push_back(index);
    EXPECT_EQ(r.worker_id(), whole.placement().ranks(index).worker_id());
    EXPECT_EQ(r.worker_address(), whole.placement().ranks(index).worker_address());
    if (index != rank) {
      EXPECT_EQ(r.memory_bytes(), 0) << "a peer's entry is its address only";
    }
  }
  std::vector<int> want = plan::PeerRanks(whole.spec().parallel(), rank);
  want.push_back(rank);
  std::sort(want.begin(), want.end());
  // pipeline pp1 and pp3 (ranks 3, 7), tp0 (4), dp1 (13), the job's ring (4, 6).
  EXPECT_THAT(want, ElementsAreArray({3, 4, 5, 6, 7, 13}));
  EXPECT_THAT(listed, ElementsAreArray(want));
}

// The acceptance of the coordinator's scale: what a rank is sent for its assignment does not
// grow with the job, from 8 to 4,096 ranks, for every rank's position (first, middle, last).
TEST(AssignmentForRank, BytesPerRankDoNotGrowWithTheJob) {
  struct Shape {
    int dp, pp, tp;
  };
  const std::vector<Shape> shapes = {{2, 2, 2},   {4, 4, 4},   {16, 4, 8}, {64, 8, 4},
                                     {256, 4, 4}, {16, 32, 8}, {64, 1, 1}, {4096, 1, 1}};
  size_t smallest_whole = 0, largest_whole = 0, largest_part = 0;
  for (const Shape& s : shapes) {
    // 8 ranks per host, so that with tp < 8 every dp group that fits the bound is hierarchical:
    // its hosts and the hierarchy's peers are sent too.
    const JobAssignment whole = Whole(s.dp, s.pp, s.tp, /*ranks_per_host=*/8);
    const int n = s.dp * s.pp * s.tp;
    size_t part_max = 0;
    for (int rank : {0, 1, n / 2, n - 1}) {
      part_max = std::max(part_max, AssignmentForRank(whole, rank).ByteSizeLong());
    }
    const size_t whole_bytes = whole.ByteSizeLong();
    if (smallest_whole == 0) smallest_whole = whole_bytes;
    largest_whole = std::max(largest_whole, whole_bytes);
    largest_part = std::max(largest_part, part_max);
    // At most 13 entries of about 50 bytes, 64 hosts, the spec and the ids: under 1 KiB at any
    // size.
    EXPECT_LE(part_max, 1024u) << s.dp << "x" << s.pp << "x" << s.tp << " (" << n << " ranks)";
  }
  // The whole placement does grow (so the bound above is the view's doing): 4,096 ranks are
  // hundreds of KiB, 8 ranks a few hundred bytes.
  EXPECT_GT(largest_whole, 100u * smallest_whole);
  EXPECT_LE(largest_part, 1024u);
  std::cout << "largest rank part: " << largest_part
            << " bytes (RankPlan included); largest whole: " << largest_whole << " bytes\n";
}

// dp=4 with ranks 0, 2 on one host and 1, 3 on another (2 ranks per host, pp=1): every rank is
// sent the same hosts, and the peers the hierarchical all-reduce adds (rank 0: its host's rank 2).
TEST(AssignmentForRank, ADpGroupOnSeveralHostsGetsItsHostsAndTheirPeers) {
  JobAssignment whole = Whole(4, 1, 1);
  for (int r = 0; r < 4; ++r) {
    whole.mutable_placement()->mutable_ranks(r)->set_host_label(r % 2 ? "odd" : "even");
  }
  for (int rank = 0; rank < 4; ++rank) {
    const JobAssignment part = AssignmentForRank(whole, rank);
    EXPECT_THAT(part.dp_host_index(), ElementsAreArray({0, 1, 0, 1})) << rank;
    std::vector<int> listed;
    for (const RankAssignment& r : part.placement().ranks()) {
      listed.push_back(RankIndex(part.spec().parallel(), r));
    }
    EXPECT_THAT(listed, ElementsAreArray({0, 1, 2, 3})) << rank;
  }
  // All on one host: the flat ring, nothing more sent.
  for (int r = 0; r < 4; ++r) whole.mutable_placement()->mutable_ranks(r)->set_host_label("one");
  const JobAssignment flat = AssignmentForRank(whole, 0);
  EXPECT_TRUE(flat.dp_host_index().empty());
  EXPECT_EQ(flat.placement().ranks_size(), 3);  // itself, 1 and 3
}

TEST(AssignmentForRank, OneRankJobHasItselfAlone) {
  const JobAssignment part = AssignmentForRank(Whole(1, 1, 1), 0);
  ASSERT_EQ(part.placement().ranks_size(), 1);
  EXPECT_EQ(part.placement().ranks(0).worker_id(), "worker-00000");
}

}  // namespace
}  // namespace dtrain::coordinator
