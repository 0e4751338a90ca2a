// The communication groups of a 3D-parallel layout, derived from (dp, pp, tp) alone: pure
// functions, the same on every rank, so every member of a group agrees on its ranks, their
// ring order and its id without talking.
//
// Ranks are ordered (dp, pp, tp) as in the coordinator's placement (proto/job.proto):
//   rank = (dp_rank * pp + pp_rank) * tp + tp_rank
// so a tensor-parallel group is tp consecutive ranks (one host, usually).
//
//   ASSIGN_OR_RETURN(ParallelLayout layout, ParallelLayout::Create(2, 4, 2));
//   ASSIGN_OR_RETURN(GroupSpec tp, TensorParallelGroup(layout, rank));
//   ASSIGN_OR_RETURN(Group group, Group::Create(&transport, tp.ranks, tp.id));
#ifndef DTRAIN_WORKER_COMM_GROUPS_H_
#define DTRAIN_WORKER_COMM_GROUPS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrain::comm {

struct RankCoord {
  int dp = 0;
  int pp = 0;
  int tp = 0;
};

class ParallelLayout {
 public:
  // InvalidArgument naming every factor ("dp=2 pp=0 tp=4: ...") unless each is >= 1.
  static absl::StatusOr<ParallelLayout> Create(int dp, int pp, int tp);

  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int tp() const { return tp_; }
  int size() const { return dp_ * pp_ * tp_; }
  std::string ToString() const;  // "dp=2 pp=4 tp=2 (16 ranks)"

  // InvalidArgument for a rank outside [0, size) or a coordinate outside the layout.
  absl::StatusOr<RankCoord> CoordOf(int rank) const;
  absl::StatusOr<int> RankOf(const RankCoord& coord) const;

 private:
  ParallelLayout(int dp, int pp, int tp) : dp_(dp), pp_(pp), tp_(tp) {}
  int dp_, pp_, tp_;
};

// A group's id (unique among the layout's groups, so messages of different groups never
// match) and its ranks in ring order.
struct GroupSpec {
  int32_t id = 0;
  std::vector<int> ranks;
};

// The tp ranks sharing `rank`'s (dp, pp): they all-reduce activations inside every layer.
absl::StatusOr<GroupSpec> TensorParallelGroup(const ParallelLayout& layout, int rank);
// The dp ranks sharing `rank`'s (pp, tp): they all-reduce (or reduce-scatter) gradients.
absl::StatusOr<GroupSpec> DataParallelGroup(const ParallelLayout& layout, int rank);
// The first and the last pipeline stage of `rank`'s (dp, tp), in that order: the first holds
// wte as the embedding, the last as the tied LM head, and they sum its gradient. nullopt for
// the middle stages; {rank} alone when pp == 1.
absl::StatusOr<std::optional<GroupSpec>> TiedEmbeddingGroup(const ParallelLayout& layout,
                                                            int rank);

// The ranks `rank` exchanges activations and gradients with: the same (dp, tp) one stage
// before and after; -1 where there is none. With `interleaved` (virtual stages), the last
// stage's next is the first stage (its next virtual stage) and the first stage's prev the last.
struct PipelineNeighbours {
  int prev = -1;
  int next = -1;
};
absl::StatusOr<PipelineNeighbours> PipelineNeighboursOf(const ParallelLayout& layout, int rank,
                                                        bool interleaved);

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_GROUPS_H_
