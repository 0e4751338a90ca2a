// Ring all-gather, in place: member i contributes its segment RingSegment(count, n, i) of
// `data`; afterwards every member holds every segment.
//
//   // each member wrote its shard into RingSegment(params.size(), dp.size(), dp.index())
//   RETURN_IF_ERROR(AllGather(dp, absl::MakeSpan(params)));
//
// Same contract and errors as AllReduce (allreduce_ring.h).
#ifndef DTRAIN_WORKER_COMM_COLLECTIVES_ALL_GATHER_H_
#define DTRAIN_WORKER_COMM_COLLECTIVES_ALL_GATHER_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/comm/collectives/group.h"

namespace dtrain::comm {

absl::Status AllGather(Group& group, absl::Span<float> data);

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_COLLECTIVES_ALL_GATHER_H_
