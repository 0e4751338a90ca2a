// Barrier: returns on a member only after every member of the group has entered it.
//
//   RETURN_IF_ERROR(Barrier(group));
//
// DeadlineExceeded naming the peer it waited for when a member does not arrive within the
// group's timeout; Unavailable when a peer is gone.
#ifndef DTRAIN_WORKER_COMM_COLLECTIVES_BARRIER_H_
#define DTRAIN_WORKER_COMM_COLLECTIVES_BARRIER_H_

#include "absl/status/status.h"
#include "worker/comm/collectives/group.h"

namespace dtrain::comm {

absl::Status Barrier(Group& group);

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_COLLECTIVES_BARRIER_H_
