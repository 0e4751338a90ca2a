#include "worker/comm/groups.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::comm {
namespace {

// Group ids: kind in the high bits, the group's index among those of its kind below.
enum GroupKind : int32_t { kTensorParallel = 1, kDataParallel = 2, kTiedEmbedding = 3 };
int32_t GroupId(GroupKind kind, int index) { return (kind << 24) | index; }

}  // namespace

absl::StatusOr<ParallelLayout> ParallelLayout::Create(int dp, int pp, int tp) {
  if (dp < 1 || pp < 1 || tp < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel layout dp=", dp, " pp=", pp, " tp=", tp, ": every factor must be >= 1"));
  }
  if (static_cast<int64_t>(dp) * pp * tp >= (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("parallel layout dp=", dp, " pp=", pp,
                                                   " tp=", tp, ": more than 2^24 ranks"));
  }
  return ParallelLayout(dp, pp, tp);
}

std::string ParallelLayout::ToString() const {
  return absl::StrCat("dp=", dp_, " pp=", pp_, " tp=", tp_, " (", size(), " ranks)");
}

absl::StatusOr<RankCoord> ParallelLayout::CoordOf(int rank) const {
  if (rank < 0 || rank >= size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " outside ", ToString()));
  }
  return RankCoord{rank / (pp_ * tp_), (rank / tp_) % pp_, rank % tp_};
}

absl::StatusOr<int> ParallelLayout::RankOf(const RankCoord& c) const {
  if (c.dp < 0 || c.dp >= dp_ || c.pp < 0 || c.pp >= pp_ || c.tp < 0 || c.tp >= tp_) {
    return absl::InvalidArgumentError(absl::StrCat("coordinate dp=", c.dp, " pp=", c.pp,
                                                   " tp=", c.tp, " outside ", ToString()));
  }
  return (c.dp * pp_ + c.pp) * tp_ + c.tp;
}

absl::StatusOr<GroupSpec> TensorParallelGroup(const ParallelLayout& layout, int rank) {
  ASSIGN_OR_RETURN(RankCoord c, layout.CoordOf(rank));
  GroupSpec g{GroupId(kTensorParallel, c.dp * layout.pp() + c.pp), {}};
  for (int t = 0; t < layout.tp(); ++t) g.ranks.push_back((c.dp * layout.pp() + c.pp) * layout.tp() + t);
  return g;
}

absl::StatusOr<GroupSpec> DataParallelGroup(const ParallelLayout& layout, int rank) {
  ASSIGN_OR_RETURN(RankCoord c, layout.CoordOf(rank));
  GroupSpec g{GroupId(kDataParallel, c.pp * layout.tp() + c.tp), {}};
  for (int d = 0; d < layout.dp(); ++d) g.ranks.push_back((d * layout.pp() + c.pp) * layout.tp() + c.tp);
  return g;
}

absl::StatusOr<std::optional<GroupSpec>> TiedEmbeddingGroup(const ParallelLayout& layout,
                                                            int rank) {
  ASSIGN_OR_RETURN(RankCoord c, layout.CoordOf(rank));
  const int last = layout.pp() - 1;
  if (c.pp != 0 && c.pp != last) return std::optional<GroupSpec>();
  GroupSpec g{GroupId(kTiedEmbedding, c.dp * layout.tp() + c.tp), {}};
  ASSIGN_OR_RETURN(int first_rank, layout.RankOf({c.dp, 0, c.tp}));
  g.ranks.push_back(first_rank);
  if (last > 0) {
    ASSIGN_OR_RETURN(int last_rank, layout.RankOf({c.dp, last, c.tp}));
    g.ranks.push_back(last_rank);
  }
  return std::optional<GroupSpec>(std::move(g));
}

absl::StatusOr<PipelineNeighbours> PipelineNeighboursOf(const ParallelLayout& layout, int rank,
                                                        bool interleaved) {
  ASSIGN_OR_RETURN(RankCoord c, layout.CoordOf(rank));
  PipelineNeighbours n;
  const int pp = layout.pp();
  if (pp == 1) return n;
  if (c.pp > 0 || interleaved) n.prev = *layout.RankOf({c.dp, (c.pp - 1 + pp) % pp, c.tp});
  if (c.pp < pp - 1 || interleaved) n.next = *layout.RankOf({c.dp, (c.pp + 1) % pp, c.tp});
  return n;
}

}  // namespace dtrain::comm
