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

RankAssignment RankCoordinates(const ParallelLayout& layout, int rank) {
  const int pp = std::max(1, layout.pp()), tp = std::max(1, layout.tp());
  RankAssignment r;
  r.set_dp_rank(rank / (pp * tp));
  r.set_pp_rank(rank / tp % pp);
  r.set_tp_rank(rank % tp);
  return r;
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
