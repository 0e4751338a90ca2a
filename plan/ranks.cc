#include "plan/ranks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dtrain::plan {

int64_t WorkersNeeded(const ParallelLayout& layout) {
  return int64_t{std::max(1, layout.dp())} * std::max(1, layout.pp()) * std::max(1, layout.tp());
}

int RankIndex(const ParallelLayout& layout, const RankAssignment& rank) {
  const int pp = std::max(1, layout.pp()), tp = std::max(1, layout.tp());
  return (rank.dp_rank() * pp + rank.pp_rank()) * tp + rank.tp_rank();
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
