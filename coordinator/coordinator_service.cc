#include "coordinator/coordinator_service.h"

#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"

namespace dtrain::coordinator {
namespace {

// Finishes a unary call with `result`.
template <typename T>
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, absl::StatusOr<T> result,
                                T* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (result.ok()) *response = *std::move(result);
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

// Streams a job's updates: first what the store already holds (state history, steps after
// after_step, events), then new ones as the notifier announces them, one write at a time. The
// final state is sent last, after every step and event before it, and ends the stream.
//
// Lifetime: gRPC holds one reference until OnDone; a parked notifier callback holds another, so
// a callback racing OnDone never touches a deleted reactor.
class WatchReactor : public grpc::ServerWriteReactor<JobUpdate> {
 public:
  WatchReactor(JobManager* manager, const WatchJobRequest& request)
      : manager_(manager), job_id_(request.job_id()), after_step_(request.after_step()) {
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
    }
    if (ok) {
      Pump();
    } else {
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away"));
    }
  }

  void OnCancel() override {
    FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&mu_);
      if (waiting_ && manager_->notifier().Cancel(token_)) {
        waiting_ = false;
        --refs_;  // the parked callback's reference; it will never run
      }
    }
    Unref();  // gRPC's reference
  }

 private:
  // Starts the next write, parks on the notifier, or finishes.
  void Pump() {
    std::optional<grpc::Status> finish;
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      while (!finished_ && !writing_ && !waiting_) {
        if (manager_->notifier().is_shut_down()) {
          finish = grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down");
          break;
        }
        if (!queue_.empty()) {
          current_ = std::move(queue_.front());
          queue_.pop_front();
          writing_ = write = true;
          break;
        }
        if (final_queued_) {
          finish = grpc::Status::OK;
          break;
        }
        const uint64_t version = manager_->notifier().Version(job_id_);
        absl::Status status = Fill();
        if (!status.ok()) {
          finish = ToGrpcStatus(status);
          break;
        }
        if (!queue_.empty()) continue;
        ++refs_;
        if (manager_->notifier().WaitOnce(
                job_id_, version, [this] { OnNotified(); }, &token_)) {
          waiting_ = true;
        } else {
          --refs_;  // something changed meanwhile (or shutdown): look again
        }
      }
      if (finish.has_value()) {
        if (finished_) return;
        finished_ = true;
      }
    }
    // Outside the lock: gRPC may run reactions inline.
    if (write) StartWrite(&current_);
    if (finish.has_value()) Finish(*finish);
  }

  void OnNotified() {
    {
      absl::MutexLock lock(&mu_);
      waiting_ = false;
    }
    Pump();
    Unref();
  }

  // Queues everything new in the store; the final state only once nothing else is left.
  absl::Status Fill() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    JobStore& store = manager_->store();
    absl::StatusOr<Job> summary = store.GetJob(job_id_, /*with_history=*/false);
    if (!summary.ok()) return summary.status();
    // The placement (dp*pp*tp ranks) rides only on state changes; steps and events, the bulk
    // of a stream, carry the summary without it.
    Job light = *summary;
    light.clear_placement();
    auto add = [&](bool with_placement = false) -> JobUpdate& {
      JobUpdate& u = queue_.emplace_back();
      *u.mutable_job() = with_placement ? *summary : light;
      return u;
    };
    absl::StatusOr<std::vector<HistoryEntry>> history = store.HistoryAfter(job_id_, history_seq_);
    if (!history.ok()) return history.status();
    for (HistoryEntry& e : *history) {
      history_seq_ = e.seq;
      if (IsFinal(e.change.state())) {
        final_ = std::move(e.change);
      } else {
        *add(/*with_placement=*/true).mutable_state_change() = std::move(e.change);
      }
    }
    constexpr int kBatch = 256;
    absl::StatusOr<std::vector<StepMetrics>> steps =
        store.MetricsAfter(job_id_, after_step_, kBatch);
    if (!steps.ok()) return steps.status();
    for (StepMetrics& m : *steps) {
      after_step_ = m.step();
      *add().mutable_step() = std::move(m);
    }
    absl::StatusOr<std::vector<JobEvent>> events = store.EventsAfter(job_id_, event_seq_, kBatch);
    if (!events.ok()) return events.status();
    for (JobEvent& e : *events) {
      event_seq_ = e.seq;
      add().set_event(std::move(e.text));
    }
    if (queue_.empty() && final_.has_value()) {
      *add(/*with_placement=*/true).mutable_state_change() = std::move(*final_);
      final_.reset();
      final_queued_ = true;
    }
    return absl::OkStatus();
  }

  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(status);
  }

  void Unref() {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      last = --refs_ == 0;
    }
    if (last) delete this;
  }

  JobManager* const manager_;
  const std::string job_id_;
  absl::Mutex mu_;
  int refs_ ABSL_GUARDED_BY(mu_) = 1;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  JobNotifier::Token token_ ABSL_GUARDED_BY(mu_) = 0;
  // Cursors: what has been queued so far.
  int64_t after_step_ ABSL_GUARDED_BY(mu_);
  int64_t history_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t event_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<StateChange> final_ ABSL_GUARDED_BY(mu_);
  bool final_queued_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<JobUpdate> queue_ ABSL_GUARDED_BY(mu_);
  JobUpdate current_;  // the message being written; untouched until OnWriteDone
};

}  // namespace

void CoordinatorService::Shutdown() { manager_->notifier().Shutdown(); }

grpc::ServerUnaryReactor* CoordinatorService::RegisterWorker(grpc::CallbackServerContext* context,
                                                             const RegisterWorkerRequest* request,
                                                             RegisterWorkerResponse* response) {
  return Reply(context, manager_->RegisterWorker(*request), response);
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(grpc::CallbackServerContext* context,
                                                        const HeartbeatRequest* request,
                                                        HeartbeatResponse* response) {
  return Reply(context, manager_->Heartbeat(*request), response);
}

grpc::ServerUnaryReactor* CoordinatorService::ReportProgress(grpc::CallbackServerContext* context,
                                                             const ReportProgressRequest* request,
                                                             ReportProgressResponse* response) {
  return Reply(context, manager_->ReportProgress(*request), response);
}

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(grpc::CallbackServerContext* context,
                                                        const SubmitJobRequest* request,
                                                        SubmitJobResponse* response) {
  absl::StatusOr<Job> job = manager_->SubmitJob(*request);
  if (!job.ok()) return Reply<SubmitJobResponse>(context, job.status(), response);
  SubmitJobResponse result;
  *result.mutable_job() = *std::move(job);
  return Reply(context, absl::StatusOr<SubmitJobResponse>(std::move(result)), response);
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* context,
                                                     const GetJobRequest* request, Job* response) {
  return Reply(context, manager_->GetJob(request->job_id()), response);
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* context,
                                                       const ListJobsRequest* request,
                                                       ListJobsResponse* response) {
  return Reply(context, manager_->ListJobs(request->limit()), response);
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* context,
                                                        const CancelJobRequest* request,
                                                        Job* response) {
  return Reply(context, manager_->CancelJob(request->job_id(), request->reason()), response);
}

grpc::ServerWriteReactor<JobUpdate>* CoordinatorService::WatchJob(
    grpc::CallbackServerContext* /*context*/, const WatchJobRequest* request) {
  return new WatchReactor(manager_, *request);
}

grpc::ServerUnaryReactor* CoordinatorService::ListWorkers(grpc::CallbackServerContext* context,
                                                          const ListWorkersRequest* /*request*/,
                                                          ListWorkersResponse* response) {
  return Reply(context, absl::StatusOr<ListWorkersResponse>(manager_->ListWorkers()), response);
}

absl::StatusOr<RunningServer> StartServer(
    const std::string& listen, grpc::Service* service,
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> interceptor) {
  grpc::ServerBuilder builder;
  if (interceptor != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::move(interceptor));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  RunningServer running;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &running.port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Ping idle connections so a watcher whose host vanished is noticed (its call is cancelled);
  // let clients ping every 10s without being told off.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.RegisterService(service);
  running.server = builder.BuildAndStart();
  if (running.server == nullptr || running.port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (address in use or not valid)"));
  }
  return running;
}

}  // namespace dtrain::coordinator
