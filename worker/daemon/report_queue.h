// ReportQueue: the worker's progress reports (ReportProgressRequest: steps, events, log lines,
// location, sealed checkpoints, outcomes) waiting to be delivered to the coordinator, oldest
// first. The daemon sends the front, pops it once the coordinator accepted it, and keeps the
// rest while the coordinator cannot be reached.
//
// Bounds: steps and other reports up to `max_reports`; beyond that the oldest one that is not
// an outcome is dropped, and the first drop and every 1000th after it queue a LOG_WARNING line
// of the dropped report's job ("report buffer full (10000): dropping the oldest; 1 dropped so
// far") right after the report that caused it, so the queue stays within one report of its
// bound. Outcomes are never dropped for room nor for age: each is kept until delivered (the
// coordinator may refuse reports for as long as its database cannot be written, and a job that
// ended meanwhile must still end there) or until the daemon drops the job's reports (DropJob:
// the coordinator says the job is no longer this worker's).
//
//   ReportQueue queue({10000}, [](const std::string& line) { Log(line); });
//   queue.Push(step_report);
//   if (const ReportQueue::Pending* next = queue.front()) { send next->request ... }
//   queue.PopIf(seq);  // once delivered
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
    uint64_t seq = 0;               // increasing in order of Push
    ReportProgressRequest request;  // job_id and one report; worker and session set when sent
  };

  // `log` receives the queue's own stderr lines (its warnings); may be empty.
  ReportQueue(Options options, std::function<void(const std::string&)> log);

  // Queues a report of request.job_id() (see the top for the bound).
  void Push(ReportProgressRequest request);
  // Logs "warning: <text>" and queues it as a LOG_WARNING line of `job_id`.
  void Warn(const std::string& job_id, const std::string& text);
  void PushOutcome(const std::string& job_id, const JobOutcome& outcome);

  // The oldest report; null when empty.
  const Pending* front() const { return reports_.empty() ? nullptr : &reports_.front(); }
  // Removes the oldest report if it is still the one numbered `seq` (it may have been dropped
  // while it was being sent).
  void PopIf(uint64_t seq);
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

  const Options options_;
  const std::function<void(const std::string&)> log_;
  std::deque<Pending> reports_;
  uint64_t next_seq_ = 0;
  int64_t dropped_ = 0;
  // (job id, text) of a "buffer full" warning to queue after the report that caused it.
  std::pair<std::string, std::string> pending_warning_;
};

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_REPORT_QUEUE_H_
