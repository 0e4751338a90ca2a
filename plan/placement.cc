#include "plan/placement.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "plan/job_plan.h"
#include "plan/ranks.h"

namespace dtrain::plan {
namespace {

const std::string& Id(const Candidate* c) { return c->worker->worker_id(); }

// The idle workers of one host label.
struct HostGroup {
  const std::string* label;
  std::vector<const Candidate*> workers;  // sorted by worker_id once the host is used
  size_t next = 0;                        // first worker not yet taken
  bool sorted = false;
  size_t left() const { return workers.size() - next; }
  // Sorts the workers once the host is used, and checks that their host numbers stood for one
  // label (a caller's mistake would otherwise put tp groups across hosts unseen).
  absl::Status Sort() {
    if (sorted) return absl::OkStatus();
    for (const Candidate* w : workers) {
      if (w->worker->host_label() != *label) {
        return absl::InvalidArgumentError(absl::StrCat("host number ", w->host,
                                                       " stands for host labels \"", *label,
                                                       "\" and \"", w->worker->host_label(), "\""));
      }
    }
    std::sort(workers.begin(), workers.end(),
              [](const Candidate* a, const Candidate* b) { return Id(a) < Id(b); });
    sorted = true;
    return absl::OkStatus();
  }
};

// Workers that can hold a rank: 0 means unknown memory, taken to fit anything.
bool Fits(const Candidate& w, int64_t need) {
  return w.memory_bytes == 0 || w.memory_bytes >= need;
}

int64_t Need(const JobPlan& plan, const RankAssignment& r) {
  return plan.stages(r.pp_rank()).memory().total();
}

// tp groups (ranks g*tp .. g*tp+tp-1) whose workers span more than one host label.
int SplitGroups(const std::vector<const Candidate*>& worker_of_rank, int tp) {
  int split = 0;
  for (size_t g = 0; g * tp < worker_of_rank.size(); ++g) {
    const std::string& host = worker_of_rank[g * tp]->worker->host_label();
    for (int t = 1; t < tp; ++t) {
      if (worker_of_rank[g * tp + t]->worker->host_label() != host) {
        ++split;
        break;
      }
    }
  }
  return split;
}

// The ranks by memory need (largest first) on the workers by memory (largest first, unknown
// first of all; ties in host label then worker id order): it fits if any assignment does.
// ResourceExhausted naming the first rank that does not fit.
absl::Status PlaceBySize(const JobPlan& plan, absl::Span<const Candidate> idle,
                         Placement* placement, std::vector<const Candidate*>* worker_of_rank) {
  std::vector<int> ranks(placement->ranks_size());
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int>(i);
  std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) {
    return Need(plan, placement->ranks(a)) > Need(plan, placement->ranks(b));
  });
  std::vector<const Candidate*> by_memory;
  by_memory.reserve(idle.size());
  for (const Candidate& c : idle) by_memory.push_back(&c);
  const auto memory = [](const Candidate* w) {
    return w->memory_bytes == 0 ? std::numeric_limits<int64_t>::max() : w->memory_bytes;
  };
  std::sort(by_memory.begin(), by_memory.end(), [&](const Candidate* a, const Candidate* b) {
    const int64_t ma = memory(a), mb = memory(b);
    if (ma != mb) return ma > mb;
    return std::tie(a->worker->host_label(), Id(a)) < std::tie(b->worker->host_label(), Id(b));
  });
  for (size_t k = 0; k < ranks.size(); ++k) {
    RankAssignment& r = *placement->mutable_ranks(ranks[k]);
    const int64_t need = Need(plan, r);
    if (!Fits(*by_memory[k], need)) {
      const std::string rank = absl::StrCat("rank ", ranks[k], " (", plan::RankLabel(r), ") needs ",
                                            plan::FormatBytes(need));
      if (k == 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            rank, "; the largest idle worker has ", plan::FormatBytes(by_memory[0]->memory_bytes),
            " (", Id(by_memory[0]), ")"));
      }
      return absl::ResourceExhaustedError(
          absl::StrCat(rank, "; only ", k, " idle workers have room for the job's ", k + 1,
                       " largest ranks (the next largest worker has ",
                       plan::FormatBytes(by_memory[k]->memory_bytes), ")"));
    }
    r.set_worker_id(Id(by_memory[k]));
    r.set_worker_address(by_memory[k]->worker->address());
    r.set_host_label(by_memory[k]->worker->host_label());
    r.set_memory_bytes(need);
    (*worker_of_rank)[ranks[k]] = by_memory[k];
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PlacementResult> PlaceJob(const JobPlan& plan,
                                         absl::Span<const WorkerInfo> idle_workers) {
  std::vector<Candidate> candidates;
  candidates.reserve(idle_workers.size());
  absl::flat_hash_set<absl::string_view> ids;
  absl::flat_hash_map<absl::string_view, uint32_t> hosts;
  for (const WorkerInfo& w : idle_workers) {
    if (!ids.insert(w.worker_id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker \"", w.worker_id(), "\" is listed twice"));
    }
    // Not owned (an aliasing pointer to nothing): `w` outlives the call.
    candidates.push_back(Candidate{
        std::shared_ptr<const WorkerInfo>(std::shared_ptr<const WorkerInfo>(), &w),
        w.device().memory_bytes(),
        hosts.try_emplace(w.host_label(), static_cast<uint32_t>(hosts.size())).first->second});
  }
  return PlaceJobOnCandidates(plan, candidates);
}

absl::StatusOr<PlacementResult> PlaceJobOnCandidates(const JobPlan& plan,
                                                     absl::Span<const Candidate> idle) {
  const ParallelLayout& layout = plan.spec().parallel();
  const int dp = layout.dp(), pp = layout.pp(), tp = layout.tp();
  const bool interleaved = plan.schedule() == SCHEDULE_INTERLEAVED;
  if (dp < 1 || pp < 1 || tp < 1 || plan.stages_size() != pp) {
    return absl::InvalidArgumentError(absl::StrCat("layout dp=", dp, " pp=", pp, " tp=", tp,
                                                   " with ", plan.stages_size(),
                                                   " planned stages is not a job plan"));
  }
  const int64_t needed = plan::WorkersNeeded(layout);
  if (static_cast<int64_t>(idle.size()) < needed) {
    return absl::ResourceExhaustedError(
        absl::StrCat("needs ", needed, " workers, ", idle.size(), " idle"));
  }

  // --- workers, host by host: most idle workers first, then by label ---
  std::vector<HostGroup> hosts;
  {
    constexpr size_t kNone = std::numeric_limits<size_t>::max();
    std::vector<size_t> index;  // Candidate::host -> its group in `hosts`
    for (const Candidate& c : idle) {
      if (c.host >= index.size())
        index.resize(std::max<size_t>(c.host + 1, 2 * index.size()), kNone);
      if (index[c.host] == kNone) {
        index[c.host] = hosts.size();
        hosts.push_back(HostGroup{&c.worker->host_label(), {}});
      }
      hosts[index[c.host]].workers.push_back(&c);
    }
  }
  std::sort(hosts.begin(), hosts.end(), [](const HostGroup& a, const HostGroup& b) {
    if (a.workers.size() != b.workers.size()) return a.workers.size() > b.workers.size();
    return *a.label < *b.label;
  });

  const int64_t groups_needed = int64_t{dp} * pp;
  std::vector<const Candidate*> taken;  // groups_needed whole tp groups, one after another
  taken.reserve(needed);
  // Pass 1: whole tp groups from one host each.
  for (HostGroup& host : hosts) {
    if (static_cast<int64_t>(taken.size()) == needed) break;
    while (host.left() >= static_cast<size_t>(tp) && static_cast<int64_t>(taken.size()) < needed) {
      RETURN_IF_ERROR(host.Sort());
      taken.insert(taken.end(), host.workers.begin() + host.next,
                   host.workers.begin() + host.next + tp);
      host.next += tp;
    }
  }
  // Pass 2: the rest from leftovers, host order kept so a group spans as few hosts as it can.
  for (HostGroup& host : hosts) {
    if (static_cast<int64_t>(taken.size()) == needed) break;
    RETURN_IF_ERROR(host.Sort());
    const size_t n = std::min<size_t>(host.left(), needed - taken.size());
    taken.insert(taken.end(), host.workers.begin() + host.next,
                 host.workers.begin() + host.next + n);
    host.next += n;
  }

  // --- ranks in (dp, pp, tp) order; group g serves (dp = g / pp, pp = g % pp) ---
  PlacementResult result;
  Placement& placement = result.placement;
  placement.mutable_ranks()->Reserve(static_cast<int>(needed));
  bool all_fit = true;
  for (int64_t g = 0; g < groups_needed; ++g) {
    const int d = static_cast<int>(g / pp), p = static_cast<int>(g % pp);
    const StagePlan& stage = plan.stages(p);
    for (int t = 0; t < tp; ++t) {
      const Candidate& w = *taken[g * tp + t];
      RankAssignment* rank = placement.add_ranks();
      rank->set_dp_rank(d);
      rank->set_pp_rank(p);
      rank->set_tp_rank(t);
      rank->set_worker_id(w.worker->worker_id());
      rank->set_worker_address(w.worker->address());
      rank->set_host_label(w.worker->host_label());
      rank->set_first_layer(stage.chunks(0).first_layer());
      rank->set_num_layers(stage.chunks(0).num_layers());
      rank->set_memory_bytes(stage.memory().total());
      if (interleaved) *rank->mutable_chunks() = stage.chunks();
      all_fit = all_fit && Fits(w, stage.memory().total());
    }
  }
  for (const StagePlan& stage : plan.stages()) placement.add_stage_costs(stage.cost());
  if (!all_fit) RETURN_IF_ERROR(PlaceBySize(plan, idle, &placement, &taken));
  result.split_tp_groups = SplitGroups(taken, tp);
  return result;
}

}  // namespace dtrain::plan
