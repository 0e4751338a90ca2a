#include "plan/stage_cuts.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::plan {
namespace {

constexpr double kEps = 1e-9;

// Layers a chunk with extra cost `extra` holds at water level t: the most whose cost stays <= t,
// and at least one.
int64_t LayersAtLevel(double t, double extra) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(t - extra + kEps)));
}

// Extra (non-block) cost of chunk k of `chunks`: the first holds the embedding, the last the head.
double ExtraCost(int k, int chunks, StageCostModel cost) {
  return (k == 0 ? cost.embed : 0.0) + (k == chunks - 1 ? cost.head : 0.0);
}

absl::Status CheckChunkCount(int n_layer, int chunks) {
  if (chunks >= 1 && chunks <= n_layer) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("cannot split ", n_layer, " layers into ", chunks,
                                                 " chunks of at least one layer"));
}

}  // namespace

StageCostModel CostModelFor(const ModelConfig& model, int seq_len) {
  const double C = model.n_embd(), T = seq_len, V = model.vocab_size();
  const double block = 24.0 * C * C + 4.0 * T * C;
  StageCostModel cost;
  if (block <= 0) return cost;
  cost.embed = C / block;
  cost.head = 2.0 * C * V / block;
  return cost;
}

absl::StatusOr<LayerPartition> PartitionLayers(int n_layer, int chunks, StageCostModel cost) {
  RETURN_IF_ERROR(CheckChunkCount(n_layer, chunks));
  auto extra = [&](int k) { return ExtraCost(k, chunks, cost); };
  // Layers held by all chunks at water level t. Chunks 1..chunks-2 are identical, so O(1).
  auto total_at = [&](double t) -> int64_t {
    if (chunks == 1) return LayersAtLevel(t, extra(0));
    return LayersAtLevel(t, extra(0)) + LayersAtLevel(t, extra(chunks - 1)) +
           int64_t{chunks - 2} * LayersAtLevel(t, 0.0);
  };
  // The greedy allocation ends at the lowest level t where the chunks hold n_layer layers. Every
  // such level is (integer layers) + (the extra of some chunk); search each family.
  double level = n_layer + extra(0);  // always enough: chunk 0 alone holds n_layer
  for (double x : {extra(0), extra(chunks - 1), 0.0}) {
    int lo = 1, hi = n_layer;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (total_at(mid + x) >= n_layer)
        hi = mid;
      else
        lo = mid + 1;
    }
    if (total_at(lo + x) >= n_layer) level = std::min(level, lo + x);
  }
  LayerPartition out;
  out.num_layers.resize(chunks);
  int64_t total = 0;
  for (int k = 0; k < chunks; ++k) {
    out.num_layers[k] = static_cast<int>(LayersAtLevel(level, extra(k)));
    total += out.num_layers[k];
  }
  // Chunks that reached exactly `level` got their last layer at this level; the greedy gives
  // layers to lower indices first, so take the surplus back from the highest.
  for (int k = chunks - 1; k >= 0 && total > n_layer; --k) {
    if (out.num_layers[k] > 1 && std::abs(out.num_layers[k] + extra(k) - level) < 1e-6) {
      --out.num_layers[k];
      --total;
    }
  }
  return CutOf(out.num_layers, cost);
}

LayerPartition CutOf(const std::vector<int>& num_layers, StageCostModel cost) {
  const int chunks = static_cast<int>(num_layers.size());
  LayerPartition out;
  out.num_layers = num_layers;
  for (int k = 0; k < chunks; ++k) out.costs.push_back(num_layers[k] + ExtraCost(k, chunks, cost));
  return out;
}

absl::StatusOr<LayerPartition> PartitionLayersBySpeed(int n_layer, const std::vector<double>& speed,
                                                      StageCostModel cost) {
  const int chunks = static_cast<int>(speed.size());
  RETURN_IF_ERROR(CheckChunkCount(n_layer, chunks));
  for (int k = 0; k < chunks; ++k) {
    if (!(speed[k] > 0) || !std::isfinite(speed[k])) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", k, "'s time per unit of cost is ", speed[k], ", not positive"));
    }
  }
  std::vector<int> layers(chunks, 1);
  auto time_with = [&](int k, int n) { return speed[k] * (n + ExtraCost(k, chunks, cost)); };
  for (int given = chunks; given < n_layer; ++given) {
    int best = 0;
    for (int k = 1; k < chunks; ++k) {
      if (time_with(k, layers[k] + 1) < time_with(best, layers[best] + 1) - kEps) best = k;
    }
    ++layers[best];
  }
  return CutOf(layers, cost);
}

}  // namespace dtrain::plan
