// The coordinator's two server streams, WatchJob and JobLogs: what the store holds about a job,
// then what is added, one write at a time, parked on the job's JobNotifier entry (no thread)
// while nothing is new (job_streams.cc: FollowReactor). Each caller holds at most its
// WatchLimiter's share of streams.
//
//   return StartWatchJob(manager_, &watches_, context, *request,
//                        Allowed(manager_, context, "WatchJob", *request));
#ifndef DTRAIN_COORDINATOR_JOB_STREAMS_H_
#define DTRAIN_COORDINATOR_JOB_STREAMS_H_

#include "absl/status/status.h"
#include "coordinator/job_manager.h"
#include "coordinator/watch_limiter.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

// `allowed`: the roles' answer for the caller (refused at once when not OK, as when the caller
// has no room for another stream).
grpc::ServerWriteReactor<JobUpdate>* StartWatchJob(JobManager* manager, WatchLimiter* watches,
                                                   grpc::CallbackServerContext* context,
                                                   const WatchJobRequest& request,
                                                   const absl::Status& allowed);
grpc::ServerWriteReactor<LogEntry>* StartJobLogs(JobManager* manager, WatchLimiter* watches,
                                                 grpc::CallbackServerContext* context,
                                                 const JobLogsRequest& request,
                                                 const absl::Status& allowed);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_STREAMS_H_
