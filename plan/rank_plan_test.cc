#include "plan/rank_plan.h"

#include "gtest/gtest.h"
#include "plan/job_plan.h"

namespace dtrain::plan {
namespace {

// dp=2 pp=2 tp=2, interleaved over 2 chunks per stage: 8 layers in 4 chunks.
JobPlan Planned() {
  absl::StatusOr<JobPlan> plan = ParseJobPlanJson(R"({
    "model": {"vocab_size": 256, "context": 64, "n_layer": 8, "n_head": 4, "n_embd": 64},
    "dataset": "/data/tiny.bin", "steps": 10, "batch_size": 16, "micro_batch_size": 2,
    "device": "cpu", "checkpoint": {"dir": "/ckpt/tiny"},
    "parallel": {"dp": 2, "pp": 2, "tp": 2, "schedule": "interleaved", "virtual_stages": 2}
  })");
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : JobPlan();
}

TEST(RankPlanOf, CarriesTheRanksStageAndTheJobsTypedChoices) {
  const JobPlan job = Planned();
  EXPECT_EQ(job.schedule(), SCHEDULE_INTERLEAVED);
  EXPECT_EQ(job.device(), DEVICE_CPU);
  for (int rank = 0; rank < job.ranks(); ++rank) {
    const RankPlan r = RankPlanOf(job, rank);
    const int stage = (rank / 2) % 2;  // (dp, pp, tp) order, tp fastest
    EXPECT_EQ(r.rank(), rank);
    EXPECT_EQ(r.schedule(), SCHEDULE_INTERLEAVED);
    EXPECT_EQ(r.device(), DEVICE_CPU);
    EXPECT_EQ(r.micro_batches(), 4);  // 16 / dp 2 / 2
    EXPECT_EQ(r.micro_batch_size(), 2);
    EXPECT_EQ(r.layout().dp(), 2);
    EXPECT_EQ(r.layout().pp(), 2);
    EXPECT_EQ(r.layout().tp(), 2);
    EXPECT_EQ(r.layout().virtual_stages(), 2);
    EXPECT_GT(r.layout().bucket_bytes(), 0);
    ASSERT_EQ(r.chunks_size(), 2) << "rank " << rank;
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(r.chunks(j).first_layer(), ChunkOf(job, stage, j).first_layer());
      EXPECT_EQ(r.chunks(j).num_layers(), ChunkOf(job, stage, j).num_layers());
    }
    EXPECT_EQ(r.memory().total(), job.stages(stage).memory().total());
  }
}

TEST(RankPlanOf, LeavesOutTheStageCutsOfOtherRanks) {
  absl::StatusOr<JobPlan> job = ParseJobPlanJson(R"({
    "model": {"vocab_size": 256, "context": 64, "n_layer": 4, "n_head": 4, "n_embd": 64},
    "dataset": "/data/tiny.bin", "steps": 10, "batch_size": 8, "checkpoint": {"dir": "/c"},
    "parallel": {"pp": 2, "stage_layers": [3, 1]}
  })");
  ASSERT_TRUE(job.ok()) << job.status();
  const RankPlan last = RankPlanOf(*job, 1);
  EXPECT_TRUE(last.layout().stage_layers().empty());
  ASSERT_EQ(last.chunks_size(), 1);
  EXPECT_EQ(last.chunks(0).first_layer(), 3);
  EXPECT_EQ(last.chunks(0).num_layers(), 1);
}

}  // namespace
}  // namespace dtrain::plan
