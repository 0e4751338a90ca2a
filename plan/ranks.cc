#include "plan/ranks.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace dtrain::plan {

namespace {

bool SameShape(const ParallelLayout& a, const ParallelLayout& b) {
  return std::max(1, a.dp()) == std::max(1, b.dp()) && std::max(1, a.pp()) == std::max(1, b.pp()) &&
         std::max(1, a.tp()) == std::max(1, b.tp());
}

// The ring neighbours of dp member `d` in the groups HierarchicalAllReduce::Create forms from
// the same hosts: the members of d's host in dp order (its ring and broadcast chain), and the
// first member of every host in host order (the leaders' ring), which d is in when it leads.
template <typename RankOf>
void AddHierarchicalPeers(absl::Span<const int> host_of, int d, RankOf rank_of,
                          std::vector<int>* peers) {
  std::vector<int> local, leaders;
  for (int i = 0; i < static_cast<int>(host_of.size()); ++i) {
    if (host_of[i] == host_of[d]) local.push_back(i);
    if (std::find(host_of.begin(), host_of.begin() + i, host_of[i]) == host_of.begin() + i) {
      leaders.push_back(i);
    }
  }
  auto add_ring_neighbours = [&](const std::vector<int>& ring) {
    const int m = static_cast<int>(ring.size());
    const int at = static_cast<int>(std::find(ring.begin(), ring.end(), d) - ring.begin());
    if (m < 2 || at == m) return;
    peers->push_back(rank_of(ring[(at + 1) % m]));
    peers->push_back(rank_of(ring[(at + m - 1) % m]));
  };
  add_ring_neighbours(local);
  add_ring_neighbours(leaders);
}

}  // namespace

std::vector<int> DpHostIndex(const Placement& whole, const ParallelLayout& layout, int rank) {
  const int dp = std::max(1, layout.dp());
  if (dp < 2 || dp > kMaxDpHostIndex) return {};
  const RankAssignment c = RankCoordinates(layout, rank);
  std::vector<std::string> labels;  // by host number
  std::vector<int> index(dp);
  bool shared_host = false;
  for (int d = 0; d < dp; ++d) {
    RankAssignment member = c;
    member.set_dp_rank(d);
    const int r = RankIndex(layout, member);
    if (r < 0 || r >= whole.ranks_size()) return {};
    const std::string& label = whole.ranks(r).host_label();
    if (label.empty()) return {};
    const auto known = std::find(labels.begin(), labels.end(), label);
    index[d] = static_cast<int>(known - labels.begin());
    shared_host |= known != labels.end();
    if (known == labels.end()) labels.push_back(label);
  }
  if (labels.size() < 2 || !shared_host) return {};
  return index;
}

CurrentLayout JobCurrentLayout(const JobSpec& spec, absl::Span<const Recovery> recoveries) {
  CurrentLayout current{spec.parallel(), 0};
  // A recovery still waiting for workers has no layout yet: the job has no run then, and the
  // last run's layout is still the one to show.
  auto latest = std::find_if(recoveries.rbegin(), recoveries.rend(),
                             [](const Recovery& r) { return r.has_layout(); });
  if (latest == recoveries.rend()) return current;
  current.layout = latest->layout();
  if (SameShape(current.layout, spec.parallel())) return current;
  current.changed_by_recovery = latest->number();
  for (auto it = latest; it != recoveries.rend(); ++it) {
    if (!it->has_layout()) continue;
    if (!SameShape(it->layout(), current.layout)) break;
    current.changed_by_recovery = it->number();
  }
  return current;
}

int ReportingRank(const ParallelLayout& layout) {
  return (std::max(1, layout.pp()) - 1) * std::max(1, layout.tp());
}

std::vector<int> PeerRanks(const ParallelLayout& layout, int rank,
                           absl::Span<const int> dp_host_index) {
  const int dp = std::max(1, layout.dp()), pp = std::max(1, layout.pp()),
            tp = std::max(1, layout.tp());
  const int size = dp * pp * tp;
  const RankAssignment c = RankCoordinates(layout, rank);
  auto at = [&](int d, int p, int t) {
    RankAssignment r;
    r.set_dp_rank((d + dp) % dp);
    r.set_pp_rank((p + pp) % pp);
    r.set_tp_rank((t + tp) % tp);
    return RankIndex(layout, r);
  };
  const int d = c.dp_rank(), p = c.pp_rank(), t = c.tp_rank();
  std::vector<int> peers = {at(d, p - 1, t),          at(d, p + 1, t),  at(d, p, t - 1),
                            at(d, p, t + 1),          at(d - 1, p, t),  at(d + 1, p, t),
                            (rank + size - 1) % size, (rank + 1) % size};
  if (static_cast<int>(dp_host_index.size()) == dp) {
    AddHierarchicalPeers(
        dp_host_index, d, [&](int member) { return at(member, p, t); }, &peers);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  peers.erase(std::remove(peers.begin(), peers.end(), rank), peers.end());
  return peers;
}

std::string RankLabel(const RankAssignment& r) {
  return absl::StrCat("dp", r.dp_rank(), " pp", r.pp_rank(), " tp", r.tp_rank());
}

std::string DescribeRank(const Placement& placement, int rank) {
  if (rank < 0 || rank >= placement.ranks_size()) return absl::StrCat("rank ", rank);
  const RankAssignment& r = placement.ranks(rank);
  if (r.worker_id().empty()) return absl::StrCat("rank ", rank, " (", RankLabel(r), ")");
  return absl::StrCat("rank ", rank, " (worker ", r.worker_id(), " at ", r.worker_address(), ", ",
                      RankLabel(r), ")");
}

}  // namespace dtrain::plan
