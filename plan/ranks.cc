#include "plan/ranks.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dtrain::plan {

namespace {

bool SameShape(const ParallelLayout& a, const ParallelLayout& b) {
  return std::max(1, a.dp()) == std::max(1, b.dp()) && std::max(1, a.pp()) == std::max(1, b.pp()) &&
         std::max(1, a.tp()) == std::max(1, b.tp());
}

}  // namespace

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

std::vector<int> PeerRanks(const ParallelLayout& layout, int rank) {
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
