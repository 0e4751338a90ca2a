#include "worker/comm/groups.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/rank_numbering.h"
#include "common/status_macros.h"

namespace dtrain::comm {
namespace {

// Group ids: kind in the high bits, the group's index among those of its kind below.
enum GroupKind : int32_t { kTensorParallel = 1, kDataParallel = 2, kTiedEmbedding = 3 };
int32_t GroupId(GroupKind kind, int index) { return (kind << 24) | index; }

// Factors as common/rank_numbering.h counts them (0 means 1).
int Pp(const ParallelLayout& l) { return std::max(1, l.pp()); }
int Tp(const ParallelLayout& l) { return std::max(1, l.tp()); }

// `rank`'s coordinates; InvalidArgument outside the layout (see the top of groups.h).
absl::StatusOr<RankAssignment> CoordinatesOf(const ParallelLayout& layout, int rank) {
  const int64_t size = WorkersNeeded(layout);
  const std::string what =
      absl::StrCat("dp=", std::max(1, layout.dp()), " pp=", Pp(layout), " tp=", Tp(layout), " (",
                   size, size == 1 ? " rank)" : " ranks)");
  if (size >= (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("layout ", what, ": more than 2^24 ranks"));
  }
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " outside ", what));
  }
  return RankCoordinates(layout, rank);
}

// The rank at (dp, pp, tp), which the caller keeps inside the layout.
int RankAt(const ParallelLayout& layout, int dp, int pp, int tp) {
  RankAssignment r;
  r.set_dp_rank(dp);
  r.set_pp_rank(pp);
  r.set_tp_rank(tp);
  return RankIndex(layout, r);
}

}  // namespace

absl::StatusOr<GroupSpec> TensorParallelGroup(const ParallelLayout& layout, int rank) {
  ASSIGN_OR_RETURN(RankAssignment c, CoordinatesOf(layout, rank));
  GroupSpec g{GroupId(kTensorParallel, c.dp_rank() * Pp(layout) + c.pp_rank()), {}};
  for (int t = 0; t < Tp(layout); ++t) {
    g.ranks.push_back(RankAt(layout, c.dp_rank(), c.pp_rank(), t));
  }
  return g;
}

absl::StatusOr<GroupSpec> DataParallelGroup(const ParallelLayout& layout, int rank) {
  ASSIGN_OR_RETURN(RankAssignment c, CoordinatesOf(layout, rank));
  GroupSpec g{GroupId(kDataParallel, c.pp_rank() * Tp(layout) + c.tp_rank()), {}};
  for (int d = 0; d < std::max(1, layout.dp()); ++d) {
    g.ranks.push_back(RankAt(layout, d, c.pp_rank(), c.tp_rank()));
  }
  return g;
}

absl::StatusOr<std::optional<GroupSpec>> TiedEmbeddingGroup(const ParallelLayout& layout,
                                                            int rank) {
  ASSIGN_OR_RETURN(RankAssignment c, CoordinatesOf(layout, rank));
  const int last = Pp(layout) - 1;
  if (c.pp_rank() != 0 && c.pp_rank() != last) return std::optional<GroupSpec>();
  GroupSpec g{GroupId(kTiedEmbedding, c.dp_rank() * Tp(layout) + c.tp_rank()), {}};
  g.ranks.push_back(RankAt(layout, c.dp_rank(), 0, c.tp_rank()));
  if (last > 0) g.ranks.push_back(RankAt(layout, c.dp_rank(), last, c.tp_rank()));
  return std::optional<GroupSpec>(std::move(g));
}

absl::StatusOr<PipelineNeighbours> PipelineNeighboursOf(const ParallelLayout& layout, int rank,
                                                        bool interleaved) {
  ASSIGN_OR_RETURN(RankAssignment c, CoordinatesOf(layout, rank));
  PipelineNeighbours n;
  const int pp = Pp(layout), s = c.pp_rank();
  if (pp == 1) return n;
  if (s > 0 || interleaved) n.prev = RankAt(layout, c.dp_rank(), (s - 1 + pp) % pp, c.tp_rank());
  if (s < pp - 1 || interleaved) n.next = RankAt(layout, c.dp_rank(), (s + 1) % pp, c.tp_rank());
  return n;
}

}  // namespace dtrain::comm
