// Broadcast: member `root`'s `data` replaces every other member's, in place.
//
//   RETURN_IF_ERROR(Broadcast(tied, absl::MakeSpan(wte, n), /*root=*/0));
//
// `data` has the same length everywhere. Errors name the op, the group and the peer.
#ifndef DTRAIN_WORKER_COMM_COLLECTIVES_BROADCAST_H_
#define DTRAIN_WORKER_COMM_COLLECTIVES_BROADCAST_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/comm/collectives/group.h"

namespace dtrain::comm {

// `root` is a member index (0..size-1), not a rank.
absl::Status Broadcast(Group& group, absl::Span<float> data, int root);

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_COLLECTIVES_BROADCAST_H_
