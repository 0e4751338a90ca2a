// JobStore: the coordinator's durable state in one SQLite file (Debian's libsqlite3).
//
// Tables (schema version 1):
//   meta          (key, value)                      schema_version
//   jobs          (seq, id, spec, state, reason, submitted_ms, placement, latest, output)
//   state_changes (job_id, seq, state, reason, time_ms)        PRIMARY KEY (job_id, seq)
//   metrics       (job_id, step, loss, grad_norm, lr, tokens_per_s, time_ms)
//                                                               PRIMARY KEY (job_id, step)
//   events        (job_id, seq, text, time_ms)                 PRIMARY KEY (job_id, seq)
// spec, placement and latest are serialized protos (JobSpec, Placement, StepMetrics).
//
// Durability: WAL journal with synchronous=FULL, so every call that returns OK has been fsynced
// and survives a coordinator crash, an OS crash or a power cut ("nothing committed is lost").
// NORMAL would only survive a process crash; the price of FULL is one fsync per write, and the
// coordinator writes a few rows per job state change and per training step, never per heartbeat.
//
// Thread-safe: one connection behind a mutex. Each write is one transaction, so a state change
// and its history row (and placement/output) are never seen apart.
#ifndef DTRAIN_COORDINATOR_JOB_STORE_H_
#define DTRAIN_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

struct sqlite3;

namespace dtrain::coordinator {

// An event line of a job, numbered from 1 per job.
struct JobEvent {
  int64_t seq = 0;
  std::string text;
  int64_t time_unix_ms = 0;
};

// A state change with its position in the job's history (from 1).
struct HistoryEntry {
  int64_t seq = 0;
  StateChange change;
};

bool IsFinal(JobState state);  // SUCCEEDED, FAILED or CANCELLED

class JobStore {
 public:
  // Opens or creates the database at `path`. Errors name the path: FailedPrecondition when the
  // file cannot be opened or created, or is another program's database or a newer schema;
  // DataLoss when it is not an SQLite database or fails SQLite's quick_check.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  const std::string& path() const { return path_; }

  // Stores a new QUEUED job with its first history entry. Ids are "job-000001", "job-000002", ...
  // from SQLite's AUTOINCREMENT counter, so they grow across restarts and are never reused.
  absl::StatusOr<Job> CreateJob(const JobSpec& spec, absl::string_view reason, int64_t now_ms);

  // Sets the job's state and reason and appends the change to its history, in one transaction
  // with the optional placement and output. NotFound for an unknown job; FailedPrecondition when
  // the job is already in a final state (final states never change).
  absl::Status UpdateState(absl::string_view job_id, JobState state, absl::string_view reason,
                           int64_t now_ms, const Placement* placement = nullptr,
                           const std::string* output = nullptr);
  absl::Status SetPlacement(absl::string_view job_id, const Placement& placement);
  absl::Status SetOutput(absl::string_view job_id, absl::string_view output);

  // Records a step (a step reported again replaces the earlier row) and makes it the job's
  // `latest`. NotFound for an unknown job.
  absl::Status AppendMetrics(absl::string_view job_id, const StepMetrics& step);
  // Appends an event line; returns its seq. NotFound for an unknown job.
  absl::StatusOr<int64_t> AppendEvent(absl::string_view job_id, absl::string_view text,
                                      int64_t now_ms);

  // NotFound for an unknown job. History is filled only when asked for.
  absl::StatusOr<Job> GetJob(absl::string_view job_id, bool with_history = true);
  // Newest first, without history; limit <= 0 means 100.
  absl::StatusOr<std::vector<Job>> ListJobs(int limit);
  // Jobs in any of `states`, oldest first, without history (startup recovery, scheduling).
  absl::StatusOr<std::vector<Job>> JobsInStates(absl::Span<const JobState> states);
  // How many jobs are in each state (states without jobs are absent); one indexed query.
  absl::StatusOr<std::map<JobState, int64_t>> CountByState();

  // Steps with step > after_step in step order, at most `limit`.
  absl::StatusOr<std::vector<StepMetrics>> MetricsAfter(absl::string_view job_id,
                                                        int64_t after_step, int limit = 1000);
  // History entries with seq > after_seq, in order.
  absl::StatusOr<std::vector<HistoryEntry>> HistoryAfter(absl::string_view job_id,
                                                         int64_t after_seq);
  // Events with seq > after_seq in order, at most `limit`; EventsFor gives them all.
  absl::StatusOr<std::vector<JobEvent>> EventsAfter(absl::string_view job_id, int64_t after_seq,
                                                    int limit = 1000);
  absl::StatusOr<std::vector<JobEvent>> EventsFor(absl::string_view job_id) {
    return EventsAfter(job_id, 0, 1 << 30);
  }

 private:
  JobStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Error(absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckJobExists(absl::string_view job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT, rolling back when it fails.
  template <typename F>
  absl::Status Transaction(F body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_STORE_H_
