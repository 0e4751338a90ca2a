// Ring reduce-scatter, in place: afterwards member i's segment RingSegment(count, n, i) of
// `data` holds op over all members of that segment; the rest of `data` is scratch (partial
// sums). ZeRO-style sharded gradients use it, then AllGather of the updated shards.
//
//   RETURN_IF_ERROR(ReduceScatter(dp, absl::MakeSpan(grads), ReduceOp::kMean));
//   Segment mine = RingSegment(grads.size(), dp.size(), dp.index());
//
// Same contract and errors as AllReduce (allreduce_ring.h).
#ifndef DTRAIN_WORKER_COMM_COLLECTIVES_REDUCE_SCATTER_H_
#define DTRAIN_WORKER_COMM_COLLECTIVES_REDUCE_SCATTER_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/comm/collectives/group.h"
#include "worker/comm/reduce.h"

namespace dtrain::comm {

absl::Status ReduceScatter(Group& group, absl::Span<float> data, ReduceOp op);

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_COLLECTIVES_REDUCE_SCATTER_H_
