// Dissemination barrier (Hensgen, Finkel and Manber, 1988). In round k = 0, 1, ... while
// 2^k < n, every member sends an empty message to member (i + 2^k) and waits for one from
// member (i - 2^k). By induction, after round k a member has heard, directly or through
// others, from the 2^(k+1) - 1 members before it; after the last round, from all n - 1 others.
// So no member leaves before every member has entered. ceil(log2 n) rounds of latency.
#include "worker/comm/collectives/barrier.h"

#include "common/status_macros.h"

namespace dtrain::comm {

namespace {

absl::Status Rounds(CollectiveOp& op, SendHandle& h) {
  const int n = op.group().size();
  const int i = op.group().index();
  for (int k = 0, distance = 1; distance < n; ++k, distance *= 2) {
    // Tell the member `distance` ahead that we (and all we heard from) have arrived.
    ASSIGN_OR_RETURN(h, op.Send((i + distance) % n, k, {}));
    // Hear the same from the member `distance` behind.
    RETURN_IF_ERROR(
        op.Recv((i - distance + n) % n, k, 0, [](int64_t, absl::Span<const std::byte>) {}));
    RETURN_IF_ERROR(op.Wait(h));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Barrier(Group& group) {
  if (group.size() == 1) return absl::OkStatus();
  CollectiveOp op(group, "barrier");
  SendHandle pending;  // outlives Finish (see CollectiveOp::Finish)
  return op.Finish(Rounds(op, pending));
}

}  // namespace dtrain::comm
