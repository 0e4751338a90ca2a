// Stage cuts: which contiguous layers each model chunk (a pipeline stage, or one virtual stage
// of the interleaved schedule) holds, balanced by a cost model. Pure functions.
//
// Cost model (relative training FLOPs per token, in units of one transformer block; forward and
// backward scale alike, so forward FLOPs suffice):
//   block  F = 24*C^2 + 4*T*C   (qkv 6C^2, attention projection 2C^2, MLP 16C^2, scores + AV 4TC)
//   head   2*C*V / F = V / (12*C + 2*T)      (the tied lm_head matmul; on the last chunk)
//   embed  C / F                              (wte gather + wpe add; on the first chunk, ~0)
// with C = n_embd, T = seq_len, V = vocab_size. GPT-2 small (V=50257, C=768, T=1024): the head
// costs 4.46 blocks, so with 12 layers and pp=4 the stages get 3, 4, 4, 1 layers.
#ifndef DTRAIN_PLAN_STAGE_CUTS_H_
#define DTRAIN_PLAN_STAGE_CUTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "proto/model.pb.h"

namespace dtrain::plan {

struct StageCostModel {
  double embed = 0;  // extra cost of the first chunk, in blocks
  double head = 0;   // extra cost of the last chunk, in blocks
};

// The cost model above for a (validated) model and sequence length.
StageCostModel CostModelFor(const ModelConfig& model, int seq_len);

struct LayerPartition {
  std::vector<int> num_layers;  // per chunk, each >= 1, summing to n_layer
  std::vector<double> costs;    // per chunk: layers + embed (first) + head (last)
};

// Splits n_layer blocks into `chunks` contiguous chunks of at least one layer each, minimising
// the largest chunk cost and, among those, spreading cost as evenly as possible (the greedy
// "give the next layer to the cheapest chunk, lowest index on ties" allocation, computed in
// O(chunks + log n_layer)). InvalidArgument unless 1 <= chunks <= n_layer.
//   PartitionLayers(12, 4, {0, 0})    -> 3, 3, 3, 3
//   PartitionLayers(8, 2, {0, 2})     -> 5, 3   (costs 5, 5)
absl::StatusOr<LayerPartition> PartitionLayers(int n_layer, int chunks, StageCostModel cost);

// A given cut (`num_layers` per chunk, already checked) with its chunk costs under `cost`.
LayerPartition CutOf(const std::vector<int>& num_layers, StageCostModel cost);

// PartitionLayers for chunks of different speeds: chunk k takes speed[k] (seconds, or any unit,
// per unit of cost) times its cost. Splits n_layer blocks into speed.size() contiguous chunks of
// at least one layer each, minimising the slowest chunk's predicted time speed[k] * costs[k]
// (the greedy "give the next layer to the chunk whose time after it is lowest, lowest index on
// ties": optimal, as each chunk's time grows with its layers). O(n_layer * chunks).
// InvalidArgument unless 1 <= chunks <= n_layer and every speed is positive and finite.
//   PartitionLayersBySpeed(8, {1, 1}, {0, 0})    -> 4, 4
//   PartitionLayersBySpeed(6, {1, 2, 1}, {0, 0}) -> 3, 1, 2   (times 3, 2, 2)
absl::StatusOr<LayerPartition> PartitionLayersBySpeed(int n_layer, const std::vector<double>& speed,
                                                      StageCostModel cost);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_STAGE_CUTS_H_
