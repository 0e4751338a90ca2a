#include "coordinator/placement.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dtrain::coordinator {
namespace {

constexpr double kEps = 1e-9;

// Layers a chunk with extra cost `extra` holds at water level t: the most whose cost stays <= t,
// and at least one.
int64_t LayersAtLevel(double t, double extra) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(t - extra + kEps)));
}

struct HostGroup {
  const std::string* label;
  std::vector<const WorkerInfo*> workers;  // sorted by worker_id
  size_t next = 0;                         // first worker not yet taken
  size_t left() const { return workers.size() - next; }
};

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
  if (chunks < 1 || chunks > n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("cannot split ", n_layer, " layers into ",
                                                   chunks, " chunks of at least one layer"));
  }
  // Extra (non-block) cost of each chunk: the first holds the embedding, the last the head.
  auto extra = [&](int k) {
    return (k == 0 ? cost.embed : 0.0) + (k == chunks - 1 ? cost.head : 0.0);
  };
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
  for (int k = 0; k < chunks; ++k) out.costs.push_back(out.num_layers[k] + extra(k));
  return out;
}

absl::StatusOr<PlacementResult> PlaceJob(const JobSpec& spec,
                                         absl::Span<const WorkerInfo> idle_workers) {
  const ParallelLayout& layout = spec.parallel();
  const int dp = layout.dp(), pp = layout.pp(), tp = layout.tp();
  const bool interleaved = layout.schedule() == "interleaved";
  const int virtual_stages = interleaved ? layout.virtual_stages() : 1;
  if (dp < 1 || pp < 1 || tp < 1 || virtual_stages < 1) {
    return absl::InvalidArgumentError(absl::StrCat("layout dp=", dp, " pp=", pp, " tp=", tp,
                                                   " virtual_stages=", virtual_stages,
                                                   " is not defaulted; validate the spec first"));
  }
  const int64_t needed = int64_t{dp} * pp * tp;
  if (static_cast<int64_t>(idle_workers.size()) < needed) {
    return absl::ResourceExhaustedError(
        absl::StrCat("needs ", needed, " workers, ", idle_workers.size(), " idle"));
  }

  // --- layers ---
  const int chunks = pp * virtual_stages;
  const absl::StatusOr<LayerPartition> partition =
      PartitionLayers(spec.model().n_layer(), chunks, CostModelFor(spec.model(), spec.seq_len()));
  if (!partition.ok()) return partition.status();
  std::vector<int> chunk_first(chunks, 0);
  for (int k = 1; k < chunks; ++k) {
    chunk_first[k] = chunk_first[k - 1] + partition->num_layers[k - 1];
  }

  // --- workers, host by host ---
  std::vector<const WorkerInfo*> sorted;
  sorted.reserve(idle_workers.size());
  for (const WorkerInfo& w : idle_workers) sorted.push_back(&w);
  std::sort(sorted.begin(), sorted.end(), [](const WorkerInfo* a, const WorkerInfo* b) {
    return std::tie(a->host_label(), a->worker_id()) < std::tie(b->host_label(), b->worker_id());
  });
  absl::flat_hash_set<absl::string_view> ids;
  std::vector<HostGroup> hosts;
  for (const WorkerInfo* w : sorted) {
    if (!ids.insert(w->worker_id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker \"", w->worker_id(), "\" is listed twice"));
    }
    if (hosts.empty() || *hosts.back().label != w->host_label()) {
      hosts.push_back(HostGroup{&w->host_label(), {}});
    }
    hosts.back().workers.push_back(w);
  }
  std::stable_sort(hosts.begin(), hosts.end(), [](const HostGroup& a, const HostGroup& b) {
    return a.workers.size() > b.workers.size();  // ties keep label order
  });

  const int64_t groups_needed = int64_t{dp} * pp;
  std::vector<std::vector<const WorkerInfo*>> groups;
  groups.reserve(groups_needed);
  // Pass 1: whole tp groups from one host each.
  for (HostGroup& host : hosts) {
    while (host.left() >= static_cast<size_t>(tp) &&
           static_cast<int64_t>(groups.size()) < groups_needed) {
      groups.emplace_back(host.workers.begin() + host.next, host.workers.begin() + host.next + tp);
      host.next += tp;
    }
  }
  // Pass 2: the rest from leftovers, host order kept so a group spans as few hosts as it can.
  PlacementResult result;
  std::vector<const WorkerInfo*> leftovers;
  for (const HostGroup& host : hosts) {
    leftovers.insert(leftovers.end(), host.workers.begin() + host.next, host.workers.end());
  }
  for (size_t i = 0; static_cast<int64_t>(groups.size()) < groups_needed; i += tp) {
    groups.emplace_back(leftovers.begin() + i, leftovers.begin() + i + tp);
    for (const WorkerInfo* w : groups.back()) {
      if (w->host_label() != groups.back().front()->host_label()) {
        ++result.split_tp_groups;
        break;
      }
    }
  }

  // --- ranks in (dp, pp, tp) order; group g serves (dp = g / pp, pp = g % pp) ---
  Placement& placement = result.placement;
  for (int64_t g = 0; g < groups_needed; ++g) {
    const int d = static_cast<int>(g / pp), p = static_cast<int>(g % pp);
    for (int t = 0; t < tp; ++t) {
      const WorkerInfo& w = *groups[g][t];
      RankAssignment* rank = placement.add_ranks();
      rank->set_dp_rank(d);
      rank->set_pp_rank(p);
      rank->set_tp_rank(t);
      rank->set_worker_id(w.worker_id());
      rank->set_worker_address(w.address());
      rank->set_first_layer(chunk_first[p]);
      rank->set_num_layers(partition->num_layers[p]);
      if (interleaved) {
        for (int j = 0; j < virtual_stages; ++j) {
          LayerRange* range = rank->add_chunks();
          range->set_first_layer(chunk_first[j * pp + p]);
          range->set_num_layers(partition->num_layers[j * pp + p]);
        }
      }
    }
  }
  for (int p = 0; p < pp; ++p) {
    double cost = 0;
    for (int j = 0; j < virtual_stages; ++j) cost += partition->costs[j * pp + p];
    placement.add_stage_costs(cost);
  }
  return result;
}

}  // namespace dtrain::coordinator
