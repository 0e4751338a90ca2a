#include "plan/placement.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "plan/job_plan.h"
#include "plan/ranks.h"

namespace dtrain::plan {
namespace {

struct HostGroup {
  const std::string* label;
  std::vector<const WorkerInfo*> workers;  // sorted by worker_id
  size_t next = 0;                         // first worker not yet taken
  size_t left() const { return workers.size() - next; }
};

}  // namespace

namespace {

// Workers that can hold a rank: 0 means unknown memory, taken to fit anything.
bool Fits(const WorkerInfo& w, int64_t need) {
  return w.device().memory_bytes() == 0 || w.device().memory_bytes() >= need;
}

int64_t Need(const JobPlan& plan, const RankAssignment& r) {
  return plan.stages(r.pp_rank()).memory().total();
}

int SplitGroups(const Placement& placement, int tp,
                const absl::flat_hash_map<std::string, const WorkerInfo*>& by_id) {
  int split = 0;
  for (int g = 0; g * tp < placement.ranks_size(); ++g) {
    const std::string& host = by_id.at(placement.ranks(g * tp).worker_id())->host_label();
    for (int t = 1; t < tp; ++t) {
      if (by_id.at(placement.ranks(g * tp + t).worker_id())->host_label() != host) {
        ++split;
        break;
      }
    }
  }
  return split;
}

// The ranks by memory need (largest first) on the workers by memory (largest first, unknown
// first of all): it fits if any assignment does. ResourceExhausted naming the first rank that
// does not fit.
absl::Status PlaceBySize(const JobPlan& plan, const std::vector<const WorkerInfo*>& workers,
                         Placement* placement) {
  std::vector<int> ranks(placement->ranks_size());
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int>(i);
  std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) {
    return Need(plan, placement->ranks(a)) > Need(plan, placement->ranks(b));
  });
  std::vector<const WorkerInfo*> by_memory = workers;
  const auto memory = [](const WorkerInfo* w) {
    return w->device().memory_bytes() == 0 ? std::numeric_limits<int64_t>::max()
                                           : w->device().memory_bytes();
  };
  std::stable_sort(by_memory.begin(), by_memory.end(),
                   [&](const WorkerInfo* a, const WorkerInfo* b) { return memory(a) > memory(b); });
  for (size_t k = 0; k < ranks.size(); ++k) {
    RankAssignment& r = *placement->mutable_ranks(ranks[k]);
    const int64_t need = Need(plan, r);
    if (!Fits(*by_memory[k], need)) {
      const std::string rank = absl::StrCat("rank ", ranks[k], " (", plan::RankLabel(r), ") needs ",
                                            plan::FormatBytes(need));
      if (k == 0) {
        return absl::ResourceExhaustedError(
            absl::StrCat(rank, "; the largest idle worker has ",
                         plan::FormatBytes(by_memory[0]->device().memory_bytes()), " (",
                         by_memory[0]->worker_id(), ")"));
      }
      return absl::ResourceExhaustedError(
          absl::StrCat(rank, "; only ", k, " idle workers have room for the job's ", k + 1,
                       " largest ranks (the next largest worker has ",
                       plan::FormatBytes(by_memory[k]->device().memory_bytes()), ")"));
    }
    r.set_worker_id(by_memory[k]->worker_id());
    r.set_worker_address(by_memory[k]->address());
    r.set_host_label(by_memory[k]->host_label());
    r.set_memory_bytes(need);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PlacementResult> PlaceJob(const JobPlan& plan,
                                         absl::Span<const WorkerInfo> idle_workers) {
  const ParallelLayout& layout = plan.spec().parallel();
  const int dp = layout.dp(), pp = layout.pp(), tp = layout.tp();
  const bool interleaved = plan.schedule() == SCHEDULE_INTERLEAVED;
  if (dp < 1 || pp < 1 || tp < 1 || plan.stages_size() != pp) {
    return absl::InvalidArgumentError(absl::StrCat("layout dp=", dp, " pp=", pp, " tp=", tp,
                                                   " with ", plan.stages_size(),
                                                   " planned stages is not a job plan"));
  }
  const int64_t needed = plan::WorkersNeeded(layout);
  if (static_cast<int64_t>(idle_workers.size()) < needed) {
    return absl::ResourceExhaustedError(
        absl::StrCat("needs ", needed, " workers, ", idle_workers.size(), " idle"));
  }

  // --- workers, host by host ---
  std::vector<const WorkerInfo*> sorted;
  sorted.reserve(idle_workers.size());
  for (const WorkerInfo& w : idle_workers) sorted.push_back(&w);
  std::sort(sorted.begin(), sorted.end(), [](const WorkerInfo* a, const WorkerInfo* b) {
    return std::tie(a->host_label(), a->worker_id()) < std::tie(b->host_label(), b->worker_id());
  });
  absl::flat_hash_map<std::string, const WorkerInfo*> by_id;
  std::vector<HostGroup> hosts;
  for (const WorkerInfo* w : sorted) {
    if (!by_id.emplace(w->worker_id(), w).second) {
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
  std::vector<const WorkerInfo*> leftovers;
  for (const HostGroup& host : hosts) {
    leftovers.insert(leftovers.end(), host.workers.begin() + host.next, host.workers.end());
  }
  for (size_t i = 0; static_cast<int64_t>(groups.size()) < groups_needed; i += tp) {
    groups.emplace_back(leftovers.begin() + i, leftovers.begin() + i + tp);
  }

  // --- ranks in (dp, pp, tp) order; group g serves (dp = g / pp, pp = g % pp) ---
  PlacementResult result;
  Placement& placement = result.placement;
  bool all_fit = true;
  for (int64_t g = 0; g < groups_needed; ++g) {
    const int d = static_cast<int>(g / pp), p = static_cast<int>(g % pp);
    const StagePlan& stage = plan.stages(p);
    for (int t = 0; t < tp; ++t) {
      const WorkerInfo& w = *groups[g][t];
      RankAssignment* rank = placement.add_ranks();
      rank->set_dp_rank(d);
      rank->set_pp_rank(p);
      rank->set_tp_rank(t);
      rank->set_worker_id(w.worker_id());
      rank->set_worker_address(w.address());
      rank->set_host_label(w.host_label());
      rank->set_first_layer(stage.chunks(0).first_layer());
      rank->set_num_layers(stage.chunks(0).num_layers());
      rank->set_memory_bytes(stage.memory().total());
      if (interleaved) *rank->mutable_chunks() = stage.chunks();
      all_fit = all_fit && Fits(w, stage.memory().total());
    }
  }
  for (const StagePlan& stage : plan.stages()) placement.add_stage_costs(stage.cost());
  if (!all_fit) RETURN_IF_ERROR(PlaceBySize(plan, sorted, &placement));
  result.split_tp_groups = SplitGroups(placement, tp, by_id);
  return result;
}

}  // namespace dtrain::plan
