#include "client/coordinator_stub.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/format.h"
#include "common/grpc_limits.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"

namespace dtrain {
namespace client {
namespace {

// Failures after which WatchJob reopens the stream: the coordinator went away or the stream
// broke (GOAWAY, reset). NOT_FOUND, INVALID_ARGUMENT and the like are answers, not breaks.
bool IsStreamBreak(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status FromGrpc(const grpc::Status& status, const char* rpc) {
  return Annotate(FromGrpcStatus(status), rpc);
}

std::unique_ptr<CoordinatorStub> CoordinatorStub::Connect(const std::string& address,
                                                          const StubOptions& options) {
  grpc::ChannelArguments args;
  // Pings keep a quiet watch stream (a queued job) alive through idle-connection reapers and
  // detect a vanished coordinator host; only while a call is open.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Reconnect quickly after a coordinator restart instead of gRPC's default backoff (up to 2
  // minutes), so that a watcher notices the new coordinator within about a second. (Not
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: despite its name it is each connection attempt's timeout;
  // the calls' deadlines bound the attempts.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(kMaxCoordinatorMessageBytes);
  auto channel = grpc::CreateCustomChannel(
      address,
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials(),
      args);
  return std::unique_ptr<CoordinatorStub>(new CoordinatorStub(address, options, channel));
}

CoordinatorStub::CoordinatorStub(std::string address, const StubOptions& options,
                                 std::shared_ptr<grpc::Channel> channel)
    : address_(std::move(address)),
      options_(options),
      channel_(std::move(channel)),
      stub_(Coordinator::NewStub(channel_)) {}

std::unique_ptr<grpc::ClientContext> CoordinatorStub::UnaryContext(absl::Duration timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + std::max(timeout, options_.timeout)));
  return context;
}

absl::StatusOr<SubmitJobResponse> CoordinatorStub::SubmitJob(const SubmitJobRequest& request) {
  return Unary(&Coordinator::Stub::SubmitJob, request, "SubmitJob");
}

absl::StatusOr<Job> CoordinatorStub::GetJob(const std::string& job_id) {
  GetJobRequest request;
  request.set_job_id(job_id);
  return Unary(&Coordinator::Stub::GetJob, request, "GetJob");
}

absl::StatusOr<ListJobsResponse> CoordinatorStub::ListJobs(int limit,
                                                           const std::vector<JobState>& states) {
  ListJobsRequest request;
  request.set_limit(limit);
  for (JobState state : states) request.add_states(state);
  return ListJobs(request);
}

absl::StatusOr<ListJobsResponse> CoordinatorStub::ListJobs(const ListJobsRequest& request) {
  return Unary(&Coordinator::Stub::ListJobs, request, "ListJobs");
}

absl::StatusOr<Job> CoordinatorStub::CancelJob(const std::string& job_id,
                                               const std::string& reason) {
  CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  return Unary(&Coordinator::Stub::CancelJob, request, "CancelJob");
}

absl::StatusOr<DeleteJobResponse> CoordinatorStub::DeleteJob(const std::string& job_id,
                                                             bool files) {
  DeleteJobRequest request;
  request.set_job_id(job_id);
  request.set_files(files);
  return Unary(&Coordinator::Stub::DeleteJob, request, "DeleteJob");
}

absl::StatusOr<SampleJobResponse> CoordinatorStub::SampleJob(const std::string& job_id,
                                                             const SampleParameters& parameters,
                                                             absl::Duration wait) {
  SampleJobRequest request;
  request.set_job_id(job_id);
  *request.mutable_parameters() = parameters;
  return Unary(&Coordinator::Stub::SampleJob, request, "SampleJob", wait);
}

absl::StatusOr<ListWorkersResponse> CoordinatorStub::ListWorkers() {
  return Unary(&Coordinator::Stub::ListWorkers, ListWorkersRequest(), "ListWorkers");
}

absl::StatusOr<ForgetWorkerResponse> CoordinatorStub::ForgetWorker(const std::string& worker_id) {
  ForgetWorkerRequest request;
  request.set_worker_id(worker_id);
  return Unary(&Coordinator::Stub::ForgetWorker, request, "ForgetWorker");
}

absl::StatusOr<DrainWorkerResponse> CoordinatorStub::DrainWorker(
    const DrainWorkerRequest& request) {
  return Unary(&Coordinator::Stub::DrainWorker, request, "DrainWorker");
}

absl::StatusOr<ListCheckpointsResponse> CoordinatorStub::ListCheckpoints(
    const std::string& job_id) {
  ListCheckpointsRequest request;
  request.set_job_id(job_id);
  return Unary(&Coordinator::Stub::ListCheckpoints, request, "ListCheckpoints");
}

absl::StatusOr<GetJobStepsResponse> CoordinatorStub::GetJobSteps(
    const GetJobStepsRequest& request) {
  return Unary(&Coordinator::Stub::GetJobSteps, request, "GetJobSteps");
}

absl::StatusOr<JobDiagnosis> CoordinatorStub::Diagnose(const std::string& job_id) {
  DiagnoseJobRequest request;
  request.set_job_id(job_id);
  return Unary(&Coordinator::Stub::Diagnose, request, "Diagnose");
}

absl::StatusOr<JobTrace> CoordinatorStub::TraceJob(const std::string& job_id,
                                                   std::optional<int64_t> step) {
  TraceJobRequest request;
  request.set_job_id(job_id);
  if (step.has_value()) request.set_step(*step);
  return Unary(&Coordinator::Stub::TraceJob, request, "TraceJob");
}

absl::StatusOr<Job> CoordinatorStub::SetJobPriority(const std::string& job_id, int32_t priority) {
  SetJobPriorityRequest request;
  request.set_job_id(job_id);
  request.set_priority(priority);
  return Unary(&Coordinator::Stub::SetJobPriority, request, "SetJobPriority");
}

absl::StatusOr<Job> CoordinatorStub::CheckpointJob(const std::string& job_id) {
  CheckpointJobRequest request;
  request.set_job_id(job_id);
  return Unary(&Coordinator::Stub::CheckpointJob, request, "CheckpointJob");
}

absl::StatusOr<RebalanceJobResponse> CoordinatorStub::RebalanceJob(const std::string& job_id) {
  RebalanceJobRequest request;
  request.set_job_id(job_id);
  return Unary(&Coordinator::Stub::RebalanceJob, request, "RebalanceJob");
}

absl::StatusOr<AccessResponse> CoordinatorStub::Access(const std::string& job_id) {
  AccessRequest request;
  request.set_job_id(job_id);
  return Unary(&Coordinator::Stub::Access, request, "Access");
}

absl::Status CoordinatorStub::JobLogs(const std::string& job_id, std::optional<int> rank,
                                      bool follow,
                                      const std::function<void(const LogEntry&)>& on_entry) {
  int64_t after_seq = 0;
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + (follow ? options_.stream_renew : options_.timeout)));
    JobLogsRequest request;
    request.set_job_id(job_id);
    if (rank.has_value()) request.set_rank(*rank);
    request.set_after_seq(after_seq);
    request.set_follow(follow);
    std::unique_ptr<grpc::ClientReader<LogEntry>> reader = stub_->JobLogs(&context, request);
    LogEntry entry;
    while (reader->Read(&entry)) {
      after_seq = std::max(after_seq, entry.seq());
      if (on_entry) on_entry(entry);
    }
    const absl::Status status = FromGrpc(reader->Finish(), "JobLogs");
    // A follow stream that reached its own deadline is renewed from the last line seen.
    if (follow && status.code() == absl::StatusCode::kDeadlineExceeded) continue;
    return status;
  }
}

absl::Status CoordinatorStub::WatchJob(const std::string& job_id, int64_t after_step,
                                       const WatchCallbacks& callbacks) {
  int64_t last_step = after_step;
  bool seen_update = false;  // a stream has answered at least once
  bool reconnecting = false;
  absl::Time broken_since = absl::InfiniteFuture();
  absl::Duration backoff = absl::Milliseconds(250);
  const absl::Status stopped_status = absl::CancelledError("WatchJob: stopped by the caller");
  while (true) {
    if (callbacks.keep_watching && !callbacks.keep_watching()) return stopped_status;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.stream_renew));
    // The first attempt fails fast when nothing listens; reconnects wait for the coordinator
    // to come back, bounded by the first-update watchdog below.
    context.set_wait_for_ready(reconnecting);
    WatchJobRequest request;
    request.set_job_id(job_id);
    request.set_after_step(last_step);
    // The coordinator replays the job's state at once, so a stream that says nothing within
    // --timeout is a hung or unreachable coordinator: cancel it. The watchdog starts before the
    // call: a wait-for-ready call blocks in its constructor until it is connected.
    absl::Duration first_update_within = options_.timeout;
    if (reconnecting) {
      first_update_within = std::max(
          absl::Milliseconds(100),
          std::min(first_update_within, broken_since + options_.reconnect_for - absl::Now()));
    }
    absl::Notification first_update;
    std::atomic<bool> watchdog_fired{false};
    std::thread watchdog([&] {
      if (!first_update.WaitForNotificationWithTimeout(first_update_within)) {
        watchdog_fired = true;
        context.TryCancel();
      }
    });
    std::unique_ptr<grpc::ClientReader<JobUpdate>> reader = stub_->WatchJob(&context, request);
    if (callbacks.on_stream_start) callbacks.on_stream_start();

    JobUpdate update;
    bool ended = false;
    bool stopped = false;
    while (reader->Read(&update)) {
      if (!first_update.HasBeenNotified()) first_update.Notify();
      seen_update = true;
      if (reconnecting) {
        reconnecting = false;
        broken_since = absl::InfiniteFuture();
        backoff = absl::Milliseconds(250);
        if (callbacks.on_reconnected) callbacks.on_reconnected();
      }
      if (update.has_step()) last_step = std::max(last_step, update.step().step());
      if (callbacks.on_update) callbacks.on_update(update);
      if (IsFinalState(update.job().state())) ended = true;
      if (!ended && callbacks.keep_watching && !callbacks.keep_watching()) {
        stopped = true;
        context.TryCancel();
        break;
      }
    }
    if (!first_update.HasBeenNotified()) first_update.Notify();
    watchdog.join();
    const grpc::Status finish = reader->Finish();
    if (ended) return absl::OkStatus();
    if (stopped) return stopped_status;

    absl::Status status = FromGrpc(finish, "WatchJob");
    if (watchdog_fired) {
      status = absl::DeadlineExceededError(
          absl::StrCat("WatchJob: no answer from the coordinator within ",
                       absl::FormatDuration(first_update_within), " (--timeout)"));
    } else if (status.ok()) {
      status = absl::UnavailableError("WatchJob: the stream ended before the job did");
    } else if (status.code() == absl::StatusCode::kDeadlineExceeded && seen_update) {
      continue;  // this stream's own deadline (stream_renew): reopen it, nothing was lost
    }
    if (!IsStreamBreak(status.code()) || !seen_update) return status;

    const absl::Time now = absl::Now();
    if (broken_since == absl::InfiniteFuture()) broken_since = now;
    if (now - broken_since >= options_.reconnect_for) {
      return absl::Status(status.code(),
                          absl::StrCat("lost the coordinator at ", address_, " for ",
                                       absl::FormatDuration(options_.reconnect_for),
                                       " (--reconnect_for); last error: ", status.message()));
    }
    if (!reconnecting) {
      reconnecting = true;
      if (callbacks.on_reconnecting) callbacks.on_reconnecting(status);
    }
    absl::SleepFor(std::min(backoff, broken_since + options_.reconnect_for - now));
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

}  // namespace client
}  // namespace dtrain
