// CoordinatorClient: the worker's side of the Coordinator service (proto/coordinator.proto),
// one method per worker RPC. Every call carries a deadline (`rpc_timeout`) and waits for a
// connection until then (wait-for-ready): while the coordinator is down a call fails after
// `rpc_timeout` (DEADLINE_EXCEEDED or UNAVAILABLE) and the caller decides when to retry; the
// channel retries its connection every 100 ms .. `max_reconnect_backoff`, so a coordinator that
// comes back is reached within about that time by a waiting call.
//
//   CoordinatorClient client("127.0.0.1:7070", absl::Seconds(5), absl::Seconds(2));
//   absl::StatusOr<RegisterWorkerResponse> r = client.RegisterWorker(request);
//
// Errors are absl::Status with the gRPC code kept (UNAVAILABLE while the coordinator is down,
// DEADLINE_EXCEEDED past the deadline, NOT_FOUND / FAILED_PRECONDITION / ALREADY_EXISTS as the
// service documents them) and a message naming the RPC and the coordinator address.
//
// Backoff: the delay sequence for retries, doubling from `initial` up to `cap`, with up to 20%
// random jitter so workers restarted together do not retry in lockstep.
#ifndef DTRAIN_WORKER_DAEMON_COORDINATOR_CLIENT_H_
#define DTRAIN_WORKER_DAEMON_COORDINATOR_CLIENT_H_

#include <memory>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"

namespace dtrain::worker {

class CoordinatorClient {
 public:
  // `credentials`: common/tls.h's ChannelCredentials (the worker's certificate; plaintext with
  // --insecure and in tests).
  CoordinatorClient(
      const std::string& target, absl::Duration rpc_timeout,
      absl::Duration max_reconnect_backoff = absl::Seconds(2),
      std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials());

  absl::StatusOr<RegisterWorkerResponse> RegisterWorker(const RegisterWorkerRequest& request);
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request);
  absl::StatusOr<ReportProgressResponse> ReportProgress(const ReportProgressRequest& request);
  // A worker leaving on purpose (SIGTERM). Its own `timeout` (short: the worker is stopping),
  // capped at rpc_timeout.
  absl::StatusOr<DeregisterWorkerResponse> DeregisterWorker(const DeregisterWorkerRequest& request,
                                                            absl::Duration timeout);

  const std::string& target() const { return target_; }

 private:
  void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) const;
  absl::Status ToStatus(const grpc::Status& status, absl::string_view rpc) const;

  std::string target_;
  absl::Duration rpc_timeout_;
  std::unique_ptr<Coordinator::Stub> stub_;
};

class Backoff {
 public:
  explicit Backoff(absl::Duration initial = absl::Milliseconds(100),
                   absl::Duration cap = absl::Seconds(2));
  // The next delay: initial, 2*initial, 4*initial, ... up to cap, each minus up to 20% jitter.
  absl::Duration Next();
  void Reset() { current_ = absl::ZeroDuration(); }

 private:
  absl::Duration initial_, cap_, current_;
  std::mt19937_64 rng_;
};

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_COORDINATOR_CLIENT_H_
