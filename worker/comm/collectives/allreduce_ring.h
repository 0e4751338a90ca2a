// Ring all-reduce: every member ends with op(x_0, ..., x_{n-1}) element-wise, in place.
// The algorithm is described in allreduce_ring.cc.
//
//   RETURN_IF_ERROR(AllReduce(dp_group, absl::MakeSpan(grads, n), ReduceOp::kMean));
//
// `data` has the same length on every member (else InvalidArgument from the shape check). 0
// elements and 1-member groups return at once. Errors name the op, the group and the peer
// (DeadlineExceeded after the group's timeout, Unavailable when a peer is gone); after an
// error `data` holds partial results.
#ifndef DTRAIN_WORKER_COMM_COLLECTIVES_ALLREDUCE_RING_H_
#define DTRAIN_WORKER_COMM_COLLECTIVES_ALLREDUCE_RING_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/comm/collectives/group.h"
#include "worker/comm/reduce.h"

namespace dtrain::comm {

absl::Status AllReduce(Group& group, absl::Span<float> data, ReduceOp op);

// A sum all-reduce over `group` with the signature of GptStage's tensor-parallel hook
// (model::AllReduceSumFn). `group` must outlive the function. Host memory only.
std::function<absl::Status(float* data, int64_t n)> AllReduceSumFunction(Group* group);

namespace internal {

// Steps [first_step, end_step) of the ring of allreduce_ring.cc over `data`: steps below
// n - 1 reduce (reduce-scatter), later ones copy (all-gather). Shared by the three ring
// collectives.
absl::Status RunRing(CollectiveOp& op, absl::Span<float> data, int first_step, int end_step,
                     ReduceOp reduce);

}  // namespace internal
}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_COLLECTIVES_ALLREDUCE_RING_H_
