// ReportQueue: the worker's progress reports (ReportProgressRequest: steps, events, log lines,
// location, sealed checkpoints, outcomes) waiting to be delivered to the coordinator, oldest
// first. The daemon sends the front (with the steps right after it, as one StepRun), pops it
// once the coordinator accepted it, and keeps the rest while the coordinator cannot be reached.
//
// Bounds: `max_reports`. A report that would go beyond makes room from the steps first: the
// queue keeps only the steps that are multiples of a stride, doubled each time it is full (1,
// 2, 4, ...: the first thinning drops every other step), and from then on a new step replaces
// the job's newest one when that one is not a multiple; so a long outage leaves the coordinator
// the whole curve at a lower, even resolution rather than only its last `max_reports` steps.
// Kept whatever the stride: the newest step of each job (its latest), and every step with a
// validation loss. The stride goes back to 1 once the queue has drained to a quarter of its
// bound. Only when no step can go is the oldest event or log line dropped, and only when none is
// left the oldest report that is not an outcome (a queue full of seals). Every thinning, and
// the first single drop and every 1000th after it, queue a LOG_WARNING line of the job ("report
// buffer full (10000): ...") right after the report that caused it. Outcomes are never dropped
// for room nor for age: each is kept until delivered (the coordinator may refuse reports for as
// long as its database cannot be written, and a job that ended meanwhile must still end there)
// or until the daemon drops the job's reports (DropJob: the coordinator says the job is no
// longer this worker's).
//
// Every report is stamped with the time it was queued (time_unix_ms), so that an event or a
// seal delivered after an outage is recorded at the time it happened.
//
//   ReportQueue queue({10000}, [](const std::string& line) { Log(line); });
//   queue.Push(step_report);
//   if (std::optional<ReportQueue::Batch> next = queue.Next(kMaxStepRun)) {
//     send next->request ...
//     queue.PopThrough(next->last_seq);  // once delivered
//   }
//
// Every report is built here (Push, Warn, PushOutcome, ReplaceFrontIf): each string field is
// made valid UTF-8 (common/utf8.h: invalid bytes written as \xNN), so that text quoted from
// files and peers never makes a report impossible to deliver.
//
// Not thread-safe: the worker daemon calls it under its own lock.
#ifndef DTRAIN_WORKER_DAEMON_REPORT_QUEUE_H_
#define DTRAIN_WORKER_DAEMON_REPORT_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "proto/coordinator.pb.h"

namespace dtrain::worker {

class ReportQueue {
 public:
  struct Options {
    int64_t max_reports = 10000;  // at least 1
  };
  struct Pending {
    uint64_t seq = 0;               // increasing in order of Push, from 1
    ReportProgressRequest request;  // job_id and one report; worker and session set when sent
  };

  // `log` receives the queue's own stderr lines (its warnings); may be empty.
  ReportQueue(Options options, std::function<void(const std::string&)> log);

  // Queues a report of request.job_id() (see the top for the bound).
  void Push(ReportProgressRequest request);
  // Logs "warning: <text>" and queues it as a LOG_WARNING line of `job_id`.
  void Warn(const std::string& job_id, const std::string& text);
  void PushOutcome(const std::string& job_id, const JobOutcome& outcome);

  // What to send next: the oldest report, numbered last_seq; when it is a step and max_steps >
  // 1, with the steps of the same job queued right after it in increasing order, at most
  // max_steps in all, as one StepRun (last_seq then the last one's number). nullopt when empty.
  struct Batch {
    uint64_t last_seq = 0;
    int reports = 0;  // queued reports it carries
    ReportProgressRequest request;
  };
  std::optional<Batch> Next(int max_steps) const;
  // The oldest report; null when empty.
  const Pending* front() const { return reports_.empty() ? nullptr : &reports_.front(); }
  // Removes the oldest reports numbered up to `seq`: what a Batch carried, less what was
  // dropped while it was being sent (a report queued since, numbered above, stays).
  void PopThrough(uint64_t seq);
  // Replaces the oldest report if it is still the one numbered `seq` (a shorter form of a report
  // the coordinator could not take).
  void ReplaceFrontIf(uint64_t seq, ReportProgressRequest request);
  // Removes every report of `job_id`.
  void DropJob(const std::string& job_id);

  bool HasJob(const std::string& job_id) const;
  bool empty() const { return reports_.empty(); }
  int64_t size() const { return static_cast<int64_t>(reports_.size()); }
  int64_t dropped() const { return dropped_; }

 private:
  void Log(const std::string& line) const;
  // Whether a step stays in the queue at this stride (see the top).
  static bool Kept(const StepMetrics& step, int64_t stride);
  static bool SameRun(const ReportProgressRequest& a, const ReportProgressRequest& b);
  // Drops the newest report when it is a step of next's job that the stride does not keep.
  void ReplaceUnkeptTail(const ReportProgressRequest& next);
  // Makes room for one report (see the top); queues nothing itself.
  void MakeRoom();
  // Doubles the stride until some step goes; returns how many went (0: no step can).
  int64_t ThinSteps();
  // After reports left the queue: back to every step once it drained.
  void AfterRemoval();

  const Options options_;
  const std::function<void(const std::string&)> log_;
  std::deque<Pending> reports_;
  uint64_t next_seq_ = 1;     // 0 is no number (ReportProgressRequest.report_seq)
  int64_t stride_ = 1;        // the steps kept are the multiples of it (see the top)
  int64_t dropped_ = 0;       // reports dropped for room, all kinds
  int64_t single_drops_ = 0;  // of which dropped one at a time (not thinned)
  // (job id, text) of a "buffer full" warning to queue after the report that caused it.
  std::pair<std::string, std::string> pending_warning_;
  bool pushing_warning_ = false;  // the room a warning takes is not warned about again
};

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_REPORT_QUEUE_H_
