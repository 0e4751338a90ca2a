// How the ranks of a job are counted and numbered: the one rule, below everything that needs it
// (the job plan, the coordinator, the CLI and the workers' communication groups). plan/ranks.h
// re-exports these beside the rules that need a whole plan or placement.
//
// Ranks are ordered (dp, pp, tp), as Placement lists them (proto/job.proto):
//   rank = (dp_rank * pp + pp_rank) * tp + tp_rank
// so a tensor-parallel group is tp consecutive ranks. Layout factors of 0 count as 1 (an
// undefaulted spec), so these never divide by zero.
#ifndef DTRAIN_COMMON_RANK_NUMBERING_H_
#define DTRAIN_COMMON_RANK_NUMBERING_H_

#include <cstdint>

#include "proto/job.pb.h"

namespace dtrain {

// Workers (ranks) a layout needs: dp * pp * tp.
int64_t WorkersNeeded(const ParallelLayout& layout);

// The index of (dp_rank, pp_rank, tp_rank): (dp_rank * pp + pp_rank) * tp + tp_rank.
int RankIndex(const ParallelLayout& layout, const RankAssignment& rank);

// The inverse of RankIndex: rank `rank`'s dp_rank, pp_rank and tp_rank (nothing else set).
// `rank` must be in [0, WorkersNeeded(layout)).
RankAssignment RankCoordinates(const ParallelLayout& layout, int rank);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_RANK_NUMBERING_H_
