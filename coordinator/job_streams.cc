#include "coordinator/job_streams.h"

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "coordinator/client_view.h"

namespace dtrain::coordinator {
namespace {

// A streaming call refused before it starts.
template <typename T>
class RefusedReactor : public grpc::ServerWriteReactor<T> {
 public:
  explicit RefusedReactor(const absl::Status& status) { this->Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

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

// A stream for a caller that may call it (`allowed`) and has room for one more (WatchLimiter);
// else one refused at once.
template <typename T>
grpc::ServerWriteReactor<T>* StartFollow(JobManager* manager, WatchLimiter* watches,
                                         grpc::CallbackServerContext* context,
                                         const absl::Status& allowed, const std::string& job_id,
                                         typename FollowReactor<T>::Fill fill) {
  if (!allowed.ok()) return new RefusedReactor<T>(allowed);
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

grpc::ServerWriteReactor<JobUpdate>* StartWatchJob(JobManager* manager, WatchLimiter* watches,
                                                   grpc::CallbackServerContext* context,
                                                   const WatchJobRequest& request,
                                                   const absl::Status& allowed) {
  return StartFollow<JobUpdate>(manager, watches, context, allowed, request.job_id(),
                                WatchFill(manager, request));
}

grpc::ServerWriteReactor<LogEntry>* StartJobLogs(JobManager* manager, WatchLimiter* watches,
                                                 grpc::CallbackServerContext* context,
                                                 const JobLogsRequest& request,
                                                 const absl::Status& allowed) {
  return StartFollow<LogEntry>(manager, watches, context, allowed, request.job_id(),
                               LogsFill(manager, request));
}

}  // namespace dtrain::coordinator
