#include "worker/daemon/coordinator_client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_limits.h"

namespace dtrain::worker {

CoordinatorClient::CoordinatorClient(const std::string& target, absl::Duration rpc_timeout,
                                     absl::Duration max_reconnect_backoff,
                                     std::shared_ptr<grpc::ChannelCredentials> credentials)
    : target_(target), rpc_timeout_(rpc_timeout) {
  grpc::ChannelArguments args;
  // gRPC's defaults back off up to 120 s between connection attempts; a worker must notice a
  // restarted coordinator within about the cap of its own retry backoff. (Not
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: despite its name it is the connection attempt's timeout,
  // and a small one makes every attempt on a loaded machine fail.)
  const int max_ms =
      static_cast<int>(std::max<int64_t>(100, absl::ToInt64Milliseconds(max_reconnect_backoff)));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(100, max_ms));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  args.SetMaxReceiveMessageSize(kMaxCoordinatorMessageBytes);
  stub_ = Coordinator::NewStub(grpc::CreateCustomChannel(target, std::move(credentials), args));
}

void CoordinatorClient::SetDeadline(grpc::ClientContext& context, absl::Duration timeout) const {
  // Wait for a connection up to the deadline instead of failing fast: a synchronous client
  // drives its channel's connection attempts only while a call is waiting (otherwise a backup
  // poller notices them every 5 s), so fail-fast calls would see a restarted coordinator late.
  context.set_wait_for_ready(true);
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(std::min(timeout, rpc_timeout_)));
}

absl::Status CoordinatorClient::ToStatus(const grpc::Status& status, absl::string_view rpc) const {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(rpc, " to coordinator ", target_, ": ", status.error_message()));
}

absl::StatusOr<RegisterWorkerResponse> CoordinatorClient::RegisterWorker(
    const RegisterWorkerRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context, rpc_timeout_);
  RegisterWorkerResponse response;
  absl::Status s = ToStatus(stub_->RegisterWorker(&context, request, &response), "RegisterWorker");
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<HeartbeatResponse> CoordinatorClient::Heartbeat(const HeartbeatRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context, rpc_timeout_);
  HeartbeatResponse response;
  absl::Status s = ToStatus(stub_->Heartbeat(&context, request, &response), "Heartbeat");
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<ReportProgressResponse> CoordinatorClient::ReportProgress(
    const ReportProgressRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context, rpc_timeout_);
  ReportProgressResponse response;
  absl::Status s = ToStatus(stub_->ReportProgress(&context, request, &response), "ReportProgress");
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<DeregisterWorkerResponse> CoordinatorClient::DeregisterWorker(
    const DeregisterWorkerRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  DeregisterWorkerResponse response;
  absl::Status s =
      ToStatus(stub_->DeregisterWorker(&context, request, &response), "DeregisterWorker");
  if (!s.ok()) return s;
  return response;
}

Backoff::Backoff(absl::Duration initial, absl::Duration cap)
    : initial_(initial), cap_(cap), current_(absl::ZeroDuration()), rng_(std::random_device{}()) {}

absl::Duration Backoff::Next() {
  current_ = current_ == absl::ZeroDuration() ? initial_ : std::min(current_ * 2, cap_);
  std::uniform_real_distribution<double> jitter(0.8, 1.0);
  return current_ * jitter(rng_);
}

}  // namespace dtrain::worker
