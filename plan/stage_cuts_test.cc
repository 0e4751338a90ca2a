#include "plan/stage_cuts.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::plan {
namespace {

using ::testing::ElementsAre;

// --- layer partition ---

TEST(PartitionLayers, EqualBlocksSplitEvenly) {
  absl::StatusOr<LayerPartition> p = PartitionLayers(12, 4, {0, 0});
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->num_layers, ElementsAre(3, 3, 3, 3));
  EXPECT_THAT(p->costs, ElementsAre(3, 3, 3, 3));
}

TEST(PartitionLayers, RemainderGoesToTheFirstStages) {
  absl::StatusOr<LayerPartition> p = PartitionLayers(10, 4, {0, 0});
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->num_layers, ElementsAre(3, 3, 2, 2));
}

TEST(PartitionLayers, HeadCostMovesLayersOffTheLastStage) {
  // 8 blocks and a head worth 2: 5 | 3+2, both cost 5.
  absl::StatusOr<LayerPartition> p = PartitionLayers(8, 2, {0, 2});
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->num_layers, ElementsAre(5, 3));
  EXPECT_THAT(p->costs, ElementsAre(5, 5));
}

TEST(PartitionLayers, EmbeddingCostMovesLayersOffTheFirstStage) {
  // 9 blocks, embedding worth 3, 3 stages: 2+3 | 4 | 3 would be max 5; best is max 4:
  // 1+3 | 4 | 4.
  absl::StatusOr<LayerPartition> p = PartitionLayers(9, 3, {3, 0});
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->num_layers, ElementsAre(1, 4, 4));
  EXPECT_DOUBLE_EQ(*std::max_element(p->costs.begin(), p->costs.end()), 4);
}

TEST(PartitionLayers, HeadHeavierThanAStageStillGetsOneLayer) {
  // GPT-2 small: the head is worth 4.46 blocks; the last stage keeps one layer (cost 5.46)
  // and the other 11 layers spread evenly over the first three.
  ModelConfig model;
  model.set_vocab_size(50257);
  model.set_n_embd(768);
  StageCostModel cost = CostModelFor(model, 1024);
  EXPECT_NEAR(cost.head, 50257.0 / (12 * 768 + 2 * 1024), 1e-9);
  EXPECT_NEAR(cost.embed, 0, 1e-3);
  absl::StatusOr<LayerPartition> p = PartitionLayers(12, 4, cost);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->num_layers, ElementsAre(3, 4, 4, 1));
  EXPECT_NEAR(p->costs[3], 1 + cost.head, 1e-9);
}

TEST(PartitionLayers, OneChunkHoldsEverything) {
  absl::StatusOr<LayerPartition> p = PartitionLayers(7, 1, {0.5, 0.25});
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->num_layers, ElementsAre(7));
  EXPECT_THAT(p->costs, ElementsAre(7.75));
}

TEST(PartitionLayers, OneLayerPerChunk) {
  absl::StatusOr<LayerPartition> p = PartitionLayers(5, 5, {0.1, 3});
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->num_layers, ElementsAre(1, 1, 1, 1, 1));
}

TEST(PartitionLayers, MinimisesTheLargestStageAgainstBruteForce) {
  // Every split of n layers into k chunks, for small n and k, against the closed form.
  for (double head : {0.0, 0.3, 1.0, 2.5, 7.0}) {
    for (int n = 1; n <= 9; ++n) {
      for (int k = 1; k <= n; ++k) {
        StageCostModel cost{0.05, head};
        absl::StatusOr<LayerPartition> p = PartitionLayers(n, k, cost);
        ASSERT_TRUE(p.ok());
        ASSERT_EQ(std::accumulate(p->num_layers.begin(), p->num_layers.end(), 0), n);
        const double got = *std::max_element(p->costs.begin(), p->costs.end());
        // Brute force over compositions of n into k positive parts.
        double best = 1e9;
        std::vector<int> parts(k, 1);
        std::function<void(int, int)> rec = [&](int i, int left) {
          if (i == k - 1) {
            parts[i] = left;
            double worst = 0;
            for (int j = 0; j < k; ++j) {
              worst = std::max(worst,
                               parts[j] + (j == 0 ? cost.embed : 0) + (j == k - 1 ? cost.head : 0));
            }
            best = std::min(best, worst);
            return;
          }
          for (int take = 1; take <= left - (k - 1 - i); ++take) {
            parts[i] = take;
            rec(i + 1, left - take);
          }
        };
        rec(0, n);
        EXPECT_NEAR(got, best, 1e-9) << "n=" << n << " k=" << k << " head=" << head;
      }
    }
  }
}

TEST(PartitionLayers, MoreChunksThanLayersIsInvalid) {
  EXPECT_EQ(PartitionLayers(3, 4, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionLayers(3, 0, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

// --- partition by measured speed ---

TEST(PartitionLayersBySpeed, EqualSpeedsSplitEvenly) {
  absl::StatusOr<LayerPartition> p = PartitionLayersBySpeed(12, {1, 1, 1}, {0, 0});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->num_layers, ElementsAre(4, 4, 4));
  EXPECT_THAT(p->costs, ElementsAre(4, 4, 4));
}

TEST(PartitionLayersBySpeed, ATwiceSlowerStageGetsHalfTheLayers) {
  // Times 1, 2, 1 per layer: n_a = n_c = 2 n_b, 5 n_b = 10 -> 4, 2, 4 (every stage takes 4).
  absl::StatusOr<LayerPartition> p = PartitionLayersBySpeed(10, {1, 2, 1}, {0, 0});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->num_layers, ElementsAre(4, 2, 4));
  // 6 layers do not split exactly: the slowest predicted time is 3 (3, 1, 2 or 2, 1, 3).
  p = PartitionLayersBySpeed(6, {1, 2, 1}, {0, 0});
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->num_layers, ElementsAre(3, 1, 2));
}

TEST(PartitionLayersBySpeed, ScaleOfTheSpeedsDoesNotMatter) {
  absl::StatusOr<LayerPartition> a = PartitionLayersBySpeed(9, {0.5, 1.5, 0.5}, {0.1, 1.0});
  absl::StatusOr<LayerPartition> b = PartitionLayersBySpeed(9, {5, 15, 5}, {0.1, 1.0});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->num_layers, b->num_layers);
}

TEST(PartitionLayersBySpeed, MatchesPartitionLayersAtEqualSpeeds) {
  for (int n = 1; n <= 20; ++n) {
    for (int chunks = 1; chunks <= std::min(n, 5); ++chunks) {
      for (StageCostModel cost : {StageCostModel{0, 0}, StageCostModel{0.3, 2.5}}) {
        absl::StatusOr<LayerPartition> even = PartitionLayers(n, chunks, cost);
        absl::StatusOr<LayerPartition> timed =
            PartitionLayersBySpeed(n, std::vector<double>(chunks, 1.0), cost);
        ASSERT_TRUE(even.ok() && timed.ok());
        EXPECT_EQ(*std::max_element(even->costs.begin(), even->costs.end()),
                  *std::max_element(timed->costs.begin(), timed->costs.end()))
            << n << " layers, " << chunks << " chunks";
        EXPECT_EQ(std::accumulate(timed->num_layers.begin(), timed->num_layers.end(), 0), n);
      }
    }
  }
}

TEST(PartitionLayersBySpeed, BadInputIsInvalidArgument) {
  EXPECT_EQ(PartitionLayersBySpeed(2, {1, 1, 1}, {0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionLayersBySpeed(2, {}, {0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionLayersBySpeed(4, {1, 0}, {0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CutOf, CostsAddTheEmbeddingAndTheHead) {
  EXPECT_THAT(CutOf({3, 1, 2}, {0.5, 2}).costs, ElementsAre(3.5, 1, 4));
}

}  // namespace
}  // namespace dtrain::plan
