#include "coordinator/coordinator_service.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_limits.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "coordinator/request_bounds.h"
#include "coordinator/roles.h"
#include "coordinator/step_thinning.h"
#include "coordinator/trace_job.h"

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

// The caller, when it may call `method` (roles.h); for the worker RPCs also when it may act as
// `worker_id`; first whether the request's strings are within their caps (request_bounds.h),
// before anything quotes them. A refusal of the caller is logged: it is either a misconfigured
// client or an intruder.
absl::StatusOr<PeerIdentity> Caller(JobManager* manager, grpc::CallbackServerContext* context,
                                    absl::string_view method,
                                    const google::protobuf::Message& request,
                                    const std::string* worker_id = nullptr) {
  RETURN_IF_ERROR(CheckRequestBounds(request));
  absl::StatusOr<PeerIdentity> who = PeerIdentityOf(*context);
  absl::Status status = who.status();
  if (who.ok()) {
    status =
        worker_id == nullptr ? Authorize(*who, method) : AuthorizeWorker(*who, method, *worker_id);
  }
  if (!status.ok()) {
    manager->options().log(
        absl::StrCat("refused ", method, " from ", context->peer(), ": ", status.message()));
    return status;
  }
  return who;
}

absl::Status Allowed(JobManager* manager, grpc::CallbackServerContext* context,
                     absl::string_view method, const google::protobuf::Message& request,
                     const std::string* worker_id = nullptr) {
  return Caller(manager, context, method, request, worker_id).status();
}

// Caller, and for a job-scoped method (roles.h IsJobScoped) whether it may act on `job_id`,
// whose owner the store has. An empty or unknown id passes: the method says so itself.
absl::StatusOr<PeerIdentity> CallerOnJob(JobManager* manager, grpc::CallbackServerContext* context,
                                         absl::string_view method,
                                         const google::protobuf::Message& request,
                                         const std::string& job_id) {
  ASSIGN_OR_RETURN(PeerIdentity who, Caller(manager, context, method, request));
  if (job_id.empty() || !IsJobScoped(method)) return who;
  // Fails closed: a call on a job whose owner cannot be read is refused (as NOT_FOUND for "no
  // job job-12"), never let through to a manager that might find the job another way.
  ASSIGN_OR_RETURN(const Job job, manager->store().GetJob(job_id, /*with_history=*/false));
  if (absl::Status s = AuthorizeOnJob(who, method, job_id, job.owner()); !s.ok()) {
    manager->options().log(
        absl::StrCat("refused ", method, " from ", context->peer(), ": ", s.message()));
    return s;
  }
  return who;
}

// A streaming call refused before it starts.
template <typename T>
class RefusedReactor : public grpc::ServerWriteReactor<T> {
 public:
  explicit RefusedReactor(const absl::Status& status) { this->Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

// What clients see of a job: all but its run's peer secret (Placement.peer_secret, a
// credential of the run's workers only). Every Job a client gets passes through here.
void StripSecrets(Job& job) {
  if (job.has_placement()) job.mutable_placement()->clear_peer_secret();
}

template <typename T>
absl::StatusOr<T> Stripped(absl::StatusOr<T> result) {
  if (!result.ok()) return result;
  if constexpr (std::is_same_v<T, Job>) {
    StripSecrets(*result);
  } else if constexpr (std::is_same_v<T, ListJobsResponse>) {
    for (Job& job : *result->mutable_jobs()) StripSecrets(job);
  } else if constexpr (std::is_same_v<T, GetJobStepsResponse>) {
    // steps only: no Job in it
  } else {
    StripSecrets(*result->mutable_job());  // SubmitJobResponse
  }
  return result;
}

// Streams what the store holds about one job, then what is added, one write at a time: `fill`
// appends to the queue whatever is new since its last call (it keeps its own cursors) and sets
// *ended once the last message is queued; when nothing is new the reactor parks on the job's
// JobNotifier entry (no thread) until something changes. Finishes OK after the last message,
// CANCELLED when the client goes away, UNAVAILABLE at Shutdown().
//
// Lifetime: gRPC holds one reference until OnDone; a parked notifier callback holds another, so
// a callback racing OnDone never touches a deleted reactor. Every StartWrite and the one Finish
// are issued under mu_, so no write follows Finish (nor gRPC's OnDone, which follows Finish).
template <typename T>
class FollowReactor : public grpc::ServerWriteReactor<T> {
 public:
  using Fill = std::function<absl::Status(std::deque<T>* queue, bool* ended)>;

  // `slot`: this stream's place among its client's (WatchLimiter), freed when it is deleted.
  FollowReactor(JobManager* manager, std::string job_id, Fill fill, WatchLimiter::Slot slot)
      : manager_(manager),
        job_id_(std::move(job_id)),
        fill_(std::move(fill)),
        slot_(std::move(slot)) {
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
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away"));
    }
  }

  void OnCancel() override { FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled")); }

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
        if (ended_) {
          finish = grpc::Status::OK;
          break;
        }
        const uint64_t version = manager_->notifier().Version(job_id_);
        absl::Status status = fill_(&queue_, &ended_);
        if (!status.ok()) {
          finish = ToGrpcStatus(status);
          break;
        }
        if (!queue_.empty() || ended_) continue;
        ++refs_;
        if (manager_->notifier().WaitOnce(
                job_id_, version, [this] { OnNotified(); }, &token_)) {
          waiting_ = true;
        } else {
          --refs_;  // something changed meanwhile (or shutdown): look again
        }
      }
      // Under the lock, so that a Finish from another thread (OnCancel) can never come between
      // the decision to write and the write: a write issued after Finish, from a notifier
      // callback, could reach gRPC's stream after OnDone destroyed it. gRPC runs none of this
      // reactor's reactions inline (OnWriteDone, OnCancel and OnDone go to its executor), so
      // holding mu_ here cannot deadlock.
      if (write) this->StartWrite(&current_);
      if (finish.has_value() && !finished_) {
        finished_ = true;
        this->Finish(*finish);
      }
    }
  }

  void OnNotified() {
    {
      absl::MutexLock lock(&mu_);
      waiting_ = false;
    }
    Pump();
    Unref();
  }

  void FinishOnce(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);  // see Pump
    if (finished_) return;
    finished_ = true;
    this->Finish(status);
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
  const Fill fill_;  // called under mu_
  const WatchLimiter::Slot slot_;
  absl::Mutex mu_;
  int refs_ ABSL_GUARDED_BY(mu_) = 1;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  JobNotifier::Token token_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<T> queue_ ABSL_GUARDED_BY(mu_);
  T current_;  // the message being written; untouched until OnWriteDone
};

// A stream of `method` (WatchJob, JobLogs) for a caller that may call it and has room for one
// more (WatchLimiter); else one refused at once.
template <typename T>
grpc::ServerWriteReactor<T>* StartFollow(JobManager* manager, WatchLimiter* watches,
                                         grpc::CallbackServerContext* context,
                                         absl::string_view method,
                                         const google::protobuf::Message& request,
                                         const std::string& job_id,
                                         typename FollowReactor<T>::Fill fill) {
  if (absl::Status s = Allowed(manager, context, method, request); !s.ok()) {
    return new RefusedReactor<T>(s);
  }
  absl::StatusOr<WatchLimiter::Slot> slot = watches->Acquire(WatchClientOf(*context));
  if (!slot.ok()) return new RefusedReactor<T>(slot.status());
  return new FollowReactor<T>(manager, job_id, std::move(fill), *std::move(slot));
}

// WatchJob's content: the state history, steps after after_step and events; the final state is
// queued last, after every step and event before it, and ends the stream.
class WatchFill {
 public:
  WatchFill(JobManager* manager, const WatchJobRequest& request)
      : manager_(manager), job_id_(request.job_id()), after_step_(request.after_step()) {}

  absl::Status operator()(std::deque<JobUpdate>* queue, bool* ended) {
    JobStore& store = manager_->store();
    ASSIGN_OR_RETURN(Job summary, store.GetJob(job_id_, /*with_history=*/false));
    StripSecrets(summary);
    manager_->FillQueuePosition(&summary);  // a queued job's place, live
    // A recovery redoes the steps after the checkpoint it resumed from: when its first step
    // arrives, the old run's later rows are gone (JobStore::AppendMetrics) and the new ones are
    // sent again from there. (A watcher reconnecting with after_step has seen the recoveries
    // before it.)
    for (int i = recoveries_seen_; i < summary.recoveries_size(); ++i) {
      const Recovery& r = summary.recoveries(i);
      if (!r.done()) break;
      if (!first_fill_ || after_step_ == 0) {
        after_step_ = std::min(after_step_, r.resumed_from_step());
      }
      recoveries_seen_ = i + 1;
    }
    first_fill_ = false;
    // The placement (dp*pp*tp ranks) rides only on state changes; steps and events, the bulk
    // of a stream, carry the summary without it.
    Job light = summary;
    light.clear_placement();
    // One batch of each kind, queued in time order (a late watcher replays the run as it
    // happened: states, steps and events interleaved). A kind that filled its batch may have
    // more before the other kinds' later items, so only items up to the earliest full batch's
    // last time go now; the cursors stop at what was queued.
    struct Item {
      int64_t time_ms = 0;
      int64_t history_seq = 0, step = 0, event_seq = 0;  // the cursor it advances
      JobUpdate update;
    };
    std::vector<Item> items;
    auto item = [&](int64_t time_ms, bool with_placement) -> Item& {
      Item& it = items.emplace_back();
      it.time_ms = time_ms;
      *it.update.mutable_job() = with_placement ? summary : light;
      return it;
    };
    ASSIGN_OR_RETURN(std::vector<HistoryEntry> history, store.HistoryAfter(job_id_, history_seq_));
    std::optional<HistoryEntry> final_entry;
    for (HistoryEntry& e : history) {
      if (IsFinal(e.change.state())) {
        final_entry = std::move(e);
      } else {
        Item& it = item(e.change.time_unix_ms(), /*with_placement=*/true);
        it.history_seq = e.seq;
        *it.update.mutable_state_change() = std::move(e.change);
      }
    }
    constexpr int kBatch = 256;
    int64_t limit = std::numeric_limits<int64_t>::max();
    ASSIGN_OR_RETURN(std::vector<StepMetrics> steps,
                     store.MetricsAfter(job_id_, after_step_, kBatch));
    if (steps.size() == kBatch) limit = std::min(limit, steps.back().time_unix_ms());
    for (StepMetrics& m : steps) {
      Item& it = item(m.time_unix_ms(), false);
      it.step = m.step();
      *it.update.mutable_step() = std::move(m);
    }
    ASSIGN_OR_RETURN(std::vector<JobEvent> events, store.EventsAfter(job_id_, event_seq_, kBatch));
    if (events.size() == kBatch) limit = std::min(limit, events.back().time_unix_ms);
    for (JobEvent& e : events) {
      Item& it = item(e.time_unix_ms, false);
      it.event_seq = e.seq;
      it.update.set_event(std::move(e.text));
    }
    std::stable_sort(items.begin(), items.end(),
                     [](const Item& a, const Item& b) { return a.time_ms < b.time_ms; });
    bool state_held = false;
    for (Item& it : items) {
      if (it.time_ms > limit) {
        state_held = state_held || it.history_seq > 0;
        continue;
      }
      if (it.history_seq > 0) history_seq_ = it.history_seq;
      if (it.step > 0) after_step_ = it.step;
      if (it.event_seq > 0) event_seq_ = it.event_seq;
      queue->push_back(std::move(it.update));
    }
    QueuePositionUpdate(light, queue);
    if (final_entry.has_value() && !state_held) {
      history_seq_ = final_entry->seq;
      final_ = std::move(final_entry->change);
    }
    if (queue->empty() && final_.has_value()) {
      JobUpdate& u = queue->emplace_back();
      *u.mutable_job() = summary;
      *u.mutable_state_change() = std::move(*final_);
      final_.reset();
      *ended = true;
    }
    return absl::OkStatus();
  }

 private:
  // A queued job's new place in the queue: an update with the job only (no state change,
  // step or event), when it differs from the last one sent (the scheduler pass wakes the
  // watchers of the jobs whose place changed: JobManager::AnnounceQueuePositions).
  void QueuePositionUpdate(const Job& light, std::deque<JobUpdate>* queue) {
    if (light.state() != QUEUED || light.queue_position() == position_sent_) return;
    position_sent_ = light.queue_position();
    *queue->emplace_back().mutable_job() = light;
  }

  JobManager* const manager_;
  const std::string job_id_;
  int32_t position_sent_ = 0;  // the queue position in the last update of it
  // Cursors: what has been queued so far.
  int64_t after_step_;
  int64_t history_seq_ = 0;
  int64_t event_seq_ = 0;
  int recoveries_seen_ = 0;  // recoveries whose redone steps are accounted for
  bool first_fill_ = true;
  std::optional<StateChange> final_;
};

// JobLogs's content: log lines after after_seq (one rank's, when asked); with follow, until the
// job has ended and every line before its end is sent.
class LogsFill {
 public:
  LogsFill(JobManager* manager, const JobLogsRequest& request)
      : manager_(manager),
        job_id_(request.job_id()),
        rank_(request.has_rank() ? std::optional<int>(request.rank()) : std::nullopt),
        follow_(request.follow()),
        after_seq_(request.after_seq()) {}

  absl::Status operator()(std::deque<LogEntry>* queue, bool* ended) {
    JobStore& store = manager_->store();
    // The state first: a line recorded before the job ended is read below.
    ASSIGN_OR_RETURN(Job job, store.GetJob(job_id_, /*with_history=*/false));
    ASSIGN_OR_RETURN(std::vector<LogEntry> lines, store.LogsAfter(job_id_, after_seq_, rank_, 256));
    for (LogEntry& line : lines) {
      after_seq_ = line.seq();
      queue->push_back(std::move(line));
    }
    if (lines.empty() && (!follow_ || IsFinal(job.state()))) *ended = true;
    return absl::OkStatus();
  }

 private:
  JobManager* const manager_;
  const std::string job_id_;
  const std::optional<int> rank_;
  const bool follow_;
  int64_t after_seq_;
};

}  // namespace

void CoordinatorService::Shutdown() {
  manager_->notifier().Shutdown();
  submits_.Stop();
  manager_->EndDeleteWaits();  // a DeleteJob waiting for a worker answers "pending" now
  manager_->EndSampleWaits();  // a SampleJob waiting for a worker answers UNAVAILABLE now
}

grpc::ServerUnaryReactor* CoordinatorService::RegisterWorker(grpc::CallbackServerContext* context,
                                                             const RegisterWorkerRequest* request,
                                                             RegisterWorkerResponse* response) {
  if (absl::Status s =
          Allowed(manager_, context, "RegisterWorker", *request, &request->worker_id());
      !s.ok()) {
    return Reply<RegisterWorkerResponse>(context, s, response);
  }
  return Reply(context, manager_->RegisterWorker(*request), response);
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(grpc::CallbackServerContext* context,
                                                        const HeartbeatRequest* request,
                                                        HeartbeatResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "Heartbeat", *request, &request->worker_id());
      !s.ok()) {
    return Reply<HeartbeatResponse>(context, s, response);
  }
  return Reply(context, manager_->Heartbeat(*request), response);
}

grpc::ServerUnaryReactor* CoordinatorService::ReportProgress(grpc::CallbackServerContext* context,
                                                             const ReportProgressRequest* request,
                                                             ReportProgressResponse* response) {
  if (absl::Status s =
          Allowed(manager_, context, "ReportProgress", *request, &request->worker_id());
      !s.ok()) {
    return Reply<ReportProgressResponse>(context, s, response);
  }
  return Reply(context, manager_->ReportProgress(*request), response);
}

template <typename T>
grpc::ServerUnaryReactor* CoordinatorService::OffThread(
    grpc::CallbackServerContext* context, T* response,
    std::function<void(absl::Time deadline, Answer<T> answer)> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time deadline = absl::FromChrono(context->deadline());
  Answer<T> answer = [reactor, response](absl::StatusOr<T> result) {
    result = Stripped(std::move(result));
    if (result.ok()) *response = *std::move(result);
    reactor->Finish(ToGrpcStatus(result.status()));
  };
  absl::Status queued = submits_.Schedule(
      [deadline, work = std::move(work), answer = std::move(answer)] { work(deadline, answer); });
  if (!queued.ok()) reactor->Finish(ToGrpcStatus(queued));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(grpc::CallbackServerContext* context,
                                                        const SubmitJobRequest* request,
                                                        SubmitJobResponse* response) {
  absl::StatusOr<PeerIdentity> who = Caller(manager_, context, "SubmitJob", *request);
  if (!who.ok()) return Reply<SubmitJobResponse>(context, who.status(), response);
  // Off gRPC's threads (bounded_executor.h): heartbeats never wait behind a submit. A submit
  // whose client gave up while it waited is not started, and one whose deadline passes while it
  // is checked creates no job (JobManager::SubmitJob).
  return OffThread<SubmitJobResponse>(
      context, response,
      [this, request, who = *who](absl::Time deadline, Answer<SubmitJobResponse> answer) {
        const int max_priority = manager_->options().max_user_priority;
        auto may_submit = [&who, max_priority](const JobSpec& spec) {
          return AuthorizePriority(who, spec.priority(), max_priority);
        };
        answer(absl::Now() >= deadline
                   ? absl::DeadlineExceededError(
                         "the client's deadline passed before the spec was read")
                   : manager_->SubmitJob(*request, deadline, who.name, may_submit));
      });
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* context,
                                                     const GetJobRequest* request, Job* response) {
  if (absl::Status s = Allowed(manager_, context, "GetJob", *request); !s.ok()) {
    return Reply<Job>(context, s, response);
  }
  return Reply(context, Stripped(manager_->GetJob(request->job_id())), response);
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* context,
                                                       const ListJobsRequest* request,
                                                       ListJobsResponse* response) {
  absl::StatusOr<PeerIdentity> who = Caller(manager_, context, "ListJobs", *request);
  if (!who.ok()) return Reply<ListJobsResponse>(context, who.status(), response);
  if (!request->mine()) return Reply(context, Stripped(manager_->ListJobs(*request)), response);
  ListJobsRequest mine = *request;
  mine.set_owner(who->name);
  return Reply(context, Stripped(manager_->ListJobs(mine)), response);
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* context,
                                                        const CancelJobRequest* request,
                                                        Job* response) {
  absl::StatusOr<PeerIdentity> who =
      CallerOnJob(manager_, context, "CancelJob", *request, request->job_id());
  if (!who.ok()) return Reply<Job>(context, who.status(), response);
  return Reply(context,
               Stripped(manager_->CancelJob(request->job_id(), request->reason(), who->name)),
               response);
}

grpc::ServerUnaryReactor* CoordinatorService::DeleteJob(grpc::CallbackServerContext* context,
                                                        const DeleteJobRequest* request,
                                                        DeleteJobResponse* response) {
  if (absl::Status s =
          CallerOnJob(manager_, context, "DeleteJob", *request, request->job_id()).status();
      !s.ok()) {
    return Reply<DeleteJobResponse>(context, s, response);
  }
  // Off gRPC's threads, as a submit (the database's write); the worker's answer is then waited
  // for without a thread: the heartbeat that brings it, or a scheduler pass, answers the call.
  return OffThread<DeleteJobResponse>(
      context, response, [this, request](absl::Time deadline, Answer<DeleteJobResponse> answer) {
        manager_->DeleteJob(*request, deadline, std::move(answer));
      });
}

grpc::ServerUnaryReactor* CoordinatorService::SampleJob(grpc::CallbackServerContext* context,
                                                        const SampleJobRequest* request,
                                                        SampleJobResponse* response) {
  if (absl::Status s =
          CallerOnJob(manager_, context, "SampleJob", *request, request->job_id()).status();
      !s.ok()) {
    return Reply<SampleJobResponse>(context, s, response);
  }
  // The worker's answer is waited for without a thread: the heartbeat that brings it, or a
  // scheduler pass (the deadline, a lost worker), answers the call.
  auto* reactor = context->DefaultReactor();
  manager_->SampleJob(*request, absl::FromChrono(context->deadline()),
                      [reactor, response](absl::StatusOr<SampleJobResponse> answer) {
                        if (answer.ok()) *response = *std::move(answer);
                        reactor->Finish(ToGrpcStatus(answer.status()));
                      });
  return reactor;
}

grpc::ServerWriteReactor<JobUpdate>* CoordinatorService::WatchJob(
    grpc::CallbackServerContext* context, const WatchJobRequest* request) {
  return StartFollow<JobUpdate>(manager_, &watches_, context, "WatchJob", *request,
                                request->job_id(), WatchFill(manager_, *request));
}

grpc::ServerWriteReactor<LogEntry>* CoordinatorService::JobLogs(
    grpc::CallbackServerContext* context, const JobLogsRequest* request) {
  return StartFollow<LogEntry>(manager_, &watches_, context, "JobLogs", *request, request->job_id(),
                               LogsFill(manager_, *request));
}

grpc::ServerUnaryReactor* CoordinatorService::DeregisterWorker(
    grpc::CallbackServerContext* context, const DeregisterWorkerRequest* request,
    DeregisterWorkerResponse* response) {
  if (absl::Status s =
          Allowed(manager_, context, "DeregisterWorker", *request, &request->worker_id());
      !s.ok()) {
    return Reply<DeregisterWorkerResponse>(context, s, response);
  }
  absl::Status status = manager_->DeregisterWorker(*request);
  if (!status.ok()) return Reply<DeregisterWorkerResponse>(context, status, response);
  return Reply(context, absl::StatusOr<DeregisterWorkerResponse>(DeregisterWorkerResponse()),
               response);
}

grpc::ServerUnaryReactor* CoordinatorService::ForgetWorker(grpc::CallbackServerContext* context,
                                                           const ForgetWorkerRequest* request,
                                                           ForgetWorkerResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "ForgetWorker", *request); !s.ok()) {
    return Reply<ForgetWorkerResponse>(context, s, response);
  }
  return Reply(context, manager_->ForgetWorker(request->worker_id()), response);
}

grpc::ServerUnaryReactor* CoordinatorService::DrainWorker(grpc::CallbackServerContext* context,
                                                          const DrainWorkerRequest* request,
                                                          DrainWorkerResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "DrainWorker", *request); !s.ok()) {
    return Reply<DrainWorkerResponse>(context, s, response);
  }
  return Reply(context, manager_->DrainWorker(*request), response);
}

grpc::ServerUnaryReactor* CoordinatorService::ListCheckpoints(grpc::CallbackServerContext* context,
                                                              const ListCheckpointsRequest* request,
                                                              ListCheckpointsResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "ListCheckpoints", *request); !s.ok()) {
    return Reply<ListCheckpointsResponse>(context, s, response);
  }
  return Reply(context, manager_->ListCheckpoints(request->job_id()), response);
}

grpc::ServerUnaryReactor* CoordinatorService::GetJobSteps(grpc::CallbackServerContext* context,
                                                          const GetJobStepsRequest* request,
                                                          GetJobStepsResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "GetJobSteps", *request); !s.ok()) {
    return Reply<GetJobStepsResponse>(context, s, response);
  }
  // Off gRPC's threads: a month-long job's range is read in batches of thousands of steps.
  return OffThread<GetJobStepsResponse>(
      context, response, [this, request](absl::Time deadline, Answer<GetJobStepsResponse> answer) {
        answer(absl::Now() >= deadline
                   ? absl::DeadlineExceededError(
                         "the client's deadline passed before its steps were read")
                   : ReadJobSteps(manager_->store(), *request));
      });
}

grpc::ServerUnaryReactor* CoordinatorService::ListWorkers(grpc::CallbackServerContext* context,
                                                          const ListWorkersRequest* request,
                                                          ListWorkersResponse* response) {
  if (absl::Status s = Allowed(manager_, context, "ListWorkers", *request); !s.ok()) {
    return Reply<ListWorkersResponse>(context, s, response);
  }
  return Reply(context, absl::StatusOr<ListWorkersResponse>(manager_->ListWorkers()), response);
}

grpc::ServerUnaryReactor* CoordinatorService::Diagnose(grpc::CallbackServerContext* context,
                                                       const DiagnoseJobRequest* request,
                                                       JobDiagnosis* response) {
  if (absl::Status s = Allowed(manager_, context, "Diagnose", *request); !s.ok()) {
    return Reply<JobDiagnosis>(context, s, response);
  }
  absl::StatusOr<Job> job = manager_->GetJob(request->job_id());
  if (!job.ok()) return Reply<JobDiagnosis>(context, job.status(), response);
  const ListWorkersResponse workers = manager_->ListWorkers();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status started =
      StartDiagnosis(*job, workers.workers(), diagnose_, [reactor, response](JobDiagnosis d) {
        *response = std::move(d);
        reactor->Finish(grpc::Status::OK);
      });
  if (!started.ok()) reactor->Finish(ToGrpcStatus(started));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::TraceJob(grpc::CallbackServerContext* context,
                                                       const TraceJobRequest* request,
                                                       JobTrace* response) {
  if (absl::Status s = Allowed(manager_, context, "TraceJob", *request); !s.ok()) {
    return Reply<JobTrace>(context, s, response);
  }
  absl::StatusOr<Job> job = manager_->GetJob(request->job_id());
  if (!job.ok()) return Reply<JobTrace>(context, job.status(), response);
  const ListWorkersResponse workers = manager_->ListWorkers();
  std::optional<int64_t> step;
  if (request->has_step()) step = request->step();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status started = StartTrace(*job, workers.workers(), diagnose_, step,
                                    [reactor, response](absl::StatusOr<JobTrace> trace) {
                                      if (trace.ok()) *response = std::move(*trace);
                                      reactor->Finish(ToGrpcStatus(trace.status()));
                                    });
  if (!started.ok()) reactor->Finish(ToGrpcStatus(started));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::SetJobPriority(grpc::CallbackServerContext* context,
                                                             const SetJobPriorityRequest* request,
                                                             Job* response) {
  absl::StatusOr<PeerIdentity> who =
      CallerOnJob(manager_, context, "SetJobPriority", *request, request->job_id());
  if (!who.ok()) return Reply<Job>(context, who.status(), response);
  // The cap a submit has (roles.h AuthorizePriority), or a user's job could pass it after.
  if (absl::Status s =
          AuthorizePriority(*who, request->priority(), manager_->options().max_user_priority);
      !s.ok()) {
    return Reply<Job>(context, s, response);
  }
  return Reply(
      context,
      Stripped(manager_->SetJobPriority(request->job_id(), request->priority(), who->name)),
      response);
}

grpc::ServerUnaryReactor* CoordinatorService::CheckpointJob(grpc::CallbackServerContext* context,
                                                            const CheckpointJobRequest* request,
                                                            Job* response) {
  absl::StatusOr<PeerIdentity> who =
      CallerOnJob(manager_, context, "CheckpointJob", *request, request->job_id());
  if (!who.ok()) return Reply<Job>(context, who.status(), response);
  return Reply(context, Stripped(manager_->CheckpointJob(request->job_id(), who->name)), response);
}

grpc::ServerUnaryReactor* CoordinatorService::RebalanceJob(grpc::CallbackServerContext* context,
                                                           const RebalanceJobRequest* request,
                                                           RebalanceJobResponse* response) {
  if (absl::Status s =
          CallerOnJob(manager_, context, "RebalanceJob", *request, request->job_id()).status();
      !s.ok()) {
    return Reply<RebalanceJobResponse>(context, s, response);
  }
  if (request->job_id().empty()) {
    return Reply<RebalanceJobResponse>(context, absl::InvalidArgumentError("job_id is empty"),
                                       response);
  }
  absl::StatusOr<RebalanceDecision> d =
      manager_->RebalanceJob(request->job_id(), {}, "dtrain rebalance");
  if (!d.ok()) return Reply<RebalanceJobResponse>(context, d.status(), response);
  RebalanceJobResponse out;
  out.set_moved(d->move);
  for (int n : d->from) out.add_from(n);
  for (int n : d->to) out.add_to(n);
  for (double t : d->stage_compute_s) out.add_stage_compute_s(t);
  out.set_summary(d->summary);
  return Reply(context, absl::StatusOr<RebalanceJobResponse>(std::move(out)), response);
}

grpc::ServerUnaryReactor* CoordinatorService::Access(grpc::CallbackServerContext* context,
                                                     const AccessRequest* request,
                                                     AccessResponse* response) {
  absl::StatusOr<PeerIdentity> who = Caller(manager_, context, "Access", *request);
  if (!who.ok()) return Reply<AccessResponse>(context, who.status(), response);
  if (request->job_id().empty()) {
    return Reply(context, absl::StatusOr<AccessResponse>(AccessOf(*who)), response);
  }
  absl::StatusOr<Job> job = manager_->store().GetJob(request->job_id(), /*with_history=*/false);
  if (!job.ok()) return Reply<AccessResponse>(context, job.status(), response);
  return Reply(context, absl::StatusOr<AccessResponse>(AccessOf(*who, &*job)), response);
}

absl::StatusOr<RunningServer> StartServer(
    const std::string& listen, grpc::Service* service,
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> interceptor,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::ServerBuilder builder;
  if (interceptor != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::move(interceptor));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  RunningServer running;
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  builder.AddListeningPort(listen, credentials, &running.port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxCoordinatorMessageBytes);
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
