// The communication groups of a job's layout (dtrain.ParallelLayout, proto/job.proto, as the job
// plan leaves it), derived from (dp, pp, tp) alone: pure functions, the same on every rank, so
// every member of a group agrees on its ranks, their ring order and its id without talking.
//
// Ranks are numbered as everywhere in dtrain (common/rank_numbering.h RankIndex / RankCoordinates):
//   rank = (dp_rank * pp + pp_rank) * tp + tp_rank
// so a tensor-parallel group is tp consecutive ranks (one host, usually).
//
//   ASSIGN_OR_RETURN(GroupSpec tp, TensorParallelGroup(plan.spec().parallel(), rank));
//   ASSIGN_OR_RETURN(Group group, Group::Create(&transport, tp.ranks, tp.id));
//
// Errors: InvalidArgument for a rank outside [0, dp*pp*tp) ("rank 24 outside dp=2 pp=3 tp=4
// (24 ranks)") or a layout of 2^24 ranks or more (group ids could not tell its groups apart).
#ifndef DTRAIN_WORKER_COMM_GROUPS_H_
#define DTRAIN_WORKER_COMM_GROUPS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace dtrain::comm {

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
absl::StatusOr<std::optional<GroupSpec>> TiedEmbeddingGroup(const ParallelLayout& layout, int rank);

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
