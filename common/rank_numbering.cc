#include "common/rank_numbering.h"

#include <algorithm>

namespace dtrain {

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

}  // namespace dtrain
