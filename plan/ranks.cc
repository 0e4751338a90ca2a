#include "plan/ranks.h"

#include <algorithm>

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

std::string RankLabel(const RankAssignment& r) {
  return absl::StrCat("dp", r.dp_rank(), " pp", r.pp_rank(), " tp", r.tp_rank());
}

std::string DescribeRank(const Placement& placement, int rank) {
  if (rank < 0 || rank >= placement.ranks_size()) return absl::StrCat("rank ", rank);
  const RankAssignment& r = placement.ranks(rank);
  return absl::StrCat("rank ", rank, " (worker ", r.worker_id(), " at ", r.worker_address(), ", ",
                      RankLabel(r), ")");
}

}  // namespace dtrain::plan
