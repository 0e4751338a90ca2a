// The CLI's side of the Coordinator service: one method per RPC the CLI uses, each with a
// deadline (--timeout), errors as absl::Status with the gRPC code kept, and WatchJob with
// reconnection across coordinator restarts.
//
//   auto stub = CoordinatorStub::Connect("127.0.0.1:7070", {});
//   absl::StatusOr<Job> job = stub->GetJob("job-000003");   // NOT_FOUND, UNAVAILABLE, ...
//
// Unary calls fail fast (UNAVAILABLE within milliseconds) when nothing listens at the address;
// they never wait for the coordinator to come up.
#ifndef DTRAIN_CLIENT_COORDINATOR_STUB_H_
#define DTRAIN_CLIENT_COORDINATOR_STUB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "proto/coordinator.grpc.pb.h"

namespace dtrain {
namespace client {

struct StubOptions {
  absl::Duration timeout = absl::Seconds(10);        // deadline of every unary call and of each
                                                     // stream's first update
  absl::Duration reconnect_for = absl::Seconds(60);  // WatchJob: give up after this long
                                                     // without the coordinator
  absl::Duration stream_renew = absl::Minutes(10);   // WatchJob: each stream's deadline; the
                                                     // stream is reopened (no gap) when it ends
  absl::Duration keepalive = absl::Seconds(20);      // HTTP/2 pings on an open watch stream
  // common/tls.h's ChannelCredentials; null: plaintext (tests against an in-process fake).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// Callbacks of WatchJob; each may be empty.
struct WatchCallbacks {
  std::function<void(const JobUpdate&)> on_update;
  // A new stream was opened (the first, a renewal or a reconnect). Each stream replays the job's
  // history and events from the start (and its steps after the last one seen), so a caller that
  // prints them skips what it already printed.
  std::function<void()> on_stream_start;
  // The stream broke (`why`); WatchJob is reconnecting, from the last step it saw.
  std::function<void(const absl::Status& why)> on_reconnecting;
  // A stream is open again after on_reconnecting.
  std::function<void()> on_reconnected;
  // Asked after each update and before each new stream: false stops the watch (the stream is
  // cancelled; WatchJob returns CANCELLED). The console stops when its browser has gone.
  std::function<bool()> keep_watching;
};

// gRPC status -> absl::Status with the same code and message, the RPC named: "GetJob: ...".
absl::Status FromGrpc(const grpc::Status& status, const char* rpc);

class CoordinatorStub {
 public:
  // Never fails: the channel connects lazily, on the first call.
  static std::unique_ptr<CoordinatorStub> Connect(const std::string& address,
                                                  const StubOptions& options);

  const std::string& address() const { return address_; }

  // The request carries the spec as JSON text (submit) or as a message (resubmit).
  absl::StatusOr<SubmitJobResponse> SubmitJob(const SubmitJobRequest& request);
  absl::StatusOr<Job> GetJob(const std::string& job_id);
  // A page of summaries, newest first; `states` empty: every state.
  absl::StatusOr<ListJobsResponse> ListJobs(int limit, const std::vector<JobState>& states = {});
  absl::StatusOr<ListJobsResponse> ListJobs(const ListJobsRequest& request);
  absl::StatusOr<Job> CancelJob(const std::string& job_id, const std::string& reason);
  absl::StatusOr<DeleteJobResponse> DeleteJob(const std::string& job_id, bool files);
  // Its deadline is `wait` (a sample takes longer than other calls), or --timeout if longer.
  absl::StatusOr<SampleJobResponse> SampleJob(const std::string& job_id,
                                              const SampleParameters& parameters,
                                              absl::Duration wait);
  absl::StatusOr<ListWorkersResponse> ListWorkers();
  absl::StatusOr<ForgetWorkerResponse> ForgetWorker(const std::string& worker_id);
  absl::StatusOr<DrainWorkerResponse> DrainWorker(const DrainWorkerRequest& request);
  absl::StatusOr<ListCheckpointsResponse> ListCheckpoints(const std::string& job_id);
  absl::StatusOr<GetJobStepsResponse> GetJobSteps(const GetJobStepsRequest& request);
  absl::StatusOr<JobDiagnosis> Diagnose(const std::string& job_id);
  absl::StatusOr<JobTrace> TraceJob(const std::string& job_id, std::optional<int64_t> step);
  absl::StatusOr<RebalanceJobResponse> RebalanceJob(const std::string& job_id);
  absl::StatusOr<Job> SetJobPriority(const std::string& job_id, int32_t priority);
  absl::StatusOr<Job> CheckpointJob(const std::string& job_id);
  // Who this client is and what it may call (on `job_id` when not empty).
  absl::StatusOr<AccessResponse> Access(const std::string& job_id = "");

  // Calls on_entry for each of the job's log lines (JobLogsRequest: `rank` unset for all). Without
  // `follow` the stream has the --timeout deadline; with it the stream stays open until the job
  // ends, renewed (from the last line seen) every options.stream_renew; a broken stream is an
  // error (UNAVAILABLE), not retried.
  absl::Status JobLogs(const std::string& job_id, std::optional<int> rank, bool follow,
                       const std::function<void(const LogEntry&)>& on_entry);

  // Follows a job until it ends: calls on_update for every update, replaying metrics after
  // `after_step` first. Returns OK once an update carries a final state (SUCCEEDED, FAILED,
  // CANCELLED). When the stream breaks (coordinator restart, network), reopens it with after_step
  // = the last step seen, for up to options.reconnect_for; a failure before the first update is
  // returned at once (UNAVAILABLE when nothing listens, NOT_FOUND for an unknown job).
  absl::Status WatchJob(const std::string& job_id, int64_t after_step,
                        const WatchCallbacks& callbacks);

 private:
  CoordinatorStub(std::string address, const StubOptions& options,
                  std::shared_ptr<grpc::Channel> channel);
  // A context whose deadline is now + `timeout`, or + options_.timeout if that is longer.
  std::unique_ptr<grpc::ClientContext> UnaryContext(absl::Duration timeout) const;
  // One unary call of `method` with the --timeout deadline (or `timeout`, if longer); a failure
  // as FromGrpc words it.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Unary(
      grpc::Status (Coordinator::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
      const Request& request, const char* rpc, absl::Duration timeout = absl::ZeroDuration()) {
    Response response;
    auto context = UnaryContext(timeout);
    absl::Status status = FromGrpc((stub_.get()->*method)(context.get(), request, &response), rpc);
    if (!status.ok()) return status;
    return response;
  }

  std::string address_;
  StubOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Coordinator::Stub> stub_;
};

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_COORDINATOR_STUB_H_
