// The job lifecycle's allowed transitions, in one table that every state change is checked
// against before it is saved (JobStore::UpdateState). A change outside the table is a bug in
// the coordinator; it is refused, never stored.
//
//   (submit) -> QUEUED -> PLACING -> RUNNING -> SUCCEEDED
//                  |         |          |
//                  |         +------> RECOVERING -> PLACING (placed again), RECOVERING (its
//                  |                        |         wait restated), SUCCEEDED (the last step
//                  |                        |         was already sealed: done is done)
//                  +-- QUEUED (its wait restated)
//   and from every state that is not final: FAILED, CANCELLED.
#ifndef DTRAIN_COORDINATOR_JOB_TRANSITIONS_H_
#define DTRAIN_COORDINATOR_JOB_TRANSITIONS_H_

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace dtrain::coordinator {

// SUCCEEDED, FAILED or CANCELLED: nothing follows them.
bool IsFinal(JobState state);

// Whether `from -> to` is in the table above.
bool IsAllowedTransition(JobState from, JobState to);

// OK, or FailedPrecondition when `from` is final (the job already ended: callers that race an
// end treat that as done), or Internal naming both states when the table has no such edge.
absl::Status CheckTransition(JobState from, JobState to);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_TRANSITIONS_H_
