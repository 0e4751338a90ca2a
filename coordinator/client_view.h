// What clients see of a job. Every Job a client gets passes through StripSecrets: the unary
// answers (coordinator_service.cc) and the streams (job_streams.cc).
#ifndef DTRAIN_COORDINATOR_CLIENT_VIEW_H_
#define DTRAIN_COORDINATOR_CLIENT_VIEW_H_

#include "proto/job.pb.h"

namespace dtrain::coordinator {

// What clients see of a job: all but its run's peer secret (Placement.peer_secret, a
// credential of the run's workers only). Every Job a client gets passes through here.
inline void StripSecrets(Job& job) {
  if (job.has_placement()) job.mutable_placement()->clear_peer_secret();
}

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_CLIENT_VIEW_H_
