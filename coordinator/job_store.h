// JobStore: the coordinator's durable state in one SQLite file (Debian's libsqlite3).
//
// Tables (schema version 10; a file of versions 1 to 9 is migrated in place when opened):
//   meta          (key, value)                      schema_version
//   jobs          (seq, id, spec, state, reason, submitted_ms, placement, latest, output, uid,
//                  started_ms, ended_ms, output_host, checkpoint, resumed_from_step,
//                  recoveries, name, summary)       indexed by state and by (name, seq)
//   job_specs     (seq, spec)                       the jobs' specs (jobs.spec is left empty)
//   state_changes (job_id, seq, state, reason, time_ms)        PRIMARY KEY (job_id, seq)
//   metrics       (job_id, step, loss, grad_norm, lr, tokens_per_s, time_ms)
//                                                               PRIMARY KEY (job_id, step)
//   events        (job_id, seq, text, time_ms, rank, worker_id, severity)
//                                                               PRIMARY KEY (job_id, seq)
//                 the job's log: the coordinator's lines (rank -1) and its ranks' (rank >= 0;
//                 at most kMaxRankLinesPerJob kept, the oldest dropped)
//   checkpoints   (job_id, step, path, time_ms)                PRIMARY KEY (job_id, step)
//   dir_removals  (job_id, uid, dir, host, worker_id, requested_ms, spec_dir)
//                                                               PRIMARY KEY job_id
//                 deleted jobs whose directory no worker has reported removing yet
//   drained_workers (worker_id, session_id, time_ms)           PRIMARY KEY worker_id
//   report_marks  (worker_id, session_id, seq)                 PRIMARY KEY worker_id
//                 the highest numbered report (ReportProgressRequest.report_seq) whose log line
//                 was recorded, per worker for its newest session (ReportMark)
// job_specs.spec, placement, latest, checkpoint and recoveries are serialized protos (JobSpec,
// Placement, StepMetrics, CheckpointStatus, RecoveryList); summary is the JobSpec a listing shows
// (name, steps, device, layout), so a listing never reads the specs (up to --max_spec_bytes each).
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
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "coordinator/job_transitions.h"  // IsFinal
#include "proto/job.pb.h"

struct sqlite3;

namespace dtrain::coordinator {

// Who wrote a line of a job's log.
struct LineSource {
  int rank = -1;          // -1: the coordinator
  std::string worker_id;  // the rank's worker
  LogSeverity severity = LOG_INFO;
};

// The number of a worker's report (ReportProgressRequest.report_seq) of `session_id`, its
// process: recorded with the log line the report carried, in the same transaction, so that a
// copy of the report sent again after the coordinator restarted (the answer to the first was
// lost with it) is known as recorded.
struct ReportMark {
  std::string worker_id;
  std::string session_id;
  uint64_t seq = 0;  // > 0
};

// An event line of a job, numbered from 1 per job.
struct JobEvent {
  int64_t seq = 0;
  std::string text;
  int64_t time_unix_ms = 0;
  int rank = -1;
  std::string worker_id;
  LogSeverity severity = LOG_INFO;
};

// A deleted job's directory that a worker is still to remove (DeleteJob with files).
struct PendingDirRemoval {
  std::string job_id;
  std::string uid;        // the job's, which its directory's job.json claim must name
  std::string dir;        // absolute, on `host`; "" when the job never reported it
  std::string host;       // host label (Job.checkpoint.host)
  std::string worker_id;  // the worker asked first: the one that ran rank 0 ("" when unknown)
  int64_t requested_ms = 0;
  std::string spec_dir;  // dir "": the spec's checkpoint.dir, which the worker resolves
};

// Lines from a job's ranks kept per job (the coordinator's own are all kept).
inline constexpr int kMaxRankLinesPerJob = 2000;

// A state change with its position in the job's history (from 1).
struct HistoryEntry {
  int64_t seq = 0;
  StateChange change;
};

// A page of a listing, newest first.
struct JobPage {
  std::vector<Job> jobs;
  int64_t next_before_seq = 0;  // > 0 when older jobs match: pass it as before_seq
};

// A range of a job's recorded steps (JobStore::MetricsExtentOf).
struct MetricsExtent {
  int64_t count = 0;
  int64_t first = 0, last = 0;  // when count > 0
};

class JobStore {
 public:
  // Opens or creates the database at `path`, holding an exclusive lock on `<path>.lock` (flock:
  // released when the store closes or the process dies, kill -9 included) in which `owner`
  // ("pid 4242 on host a, listening on 0.0.0.0:7070") is written, so a second coordinator on the
  // same file refuses to start: FailedPrecondition "coordinator db X is in use by another
  // coordinator (pid 4242 on host a, ...)". Other errors name the path: FailedPrecondition when
  // the file cannot be opened or created, or is another program's database or a newer schema;
  // DataLoss when it is not an SQLite database or fails SQLite's quick_check.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path,
                                                        const std::string& owner = "");
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  const std::string& path() const { return path_; }

  // Writes failing now: since the first failed transaction after the last one committed, and
  // the latest failure ("coordinator db /var/lib/dtrain/db: COMMIT: database or disk is
  // full"). Unset while writes succeed. Only the database's own refusals count (full, locked,
  // an I/O error), not a write refused for what it asked (an unknown job, a final state).
  struct WriteFailure {
    absl::Time since;
    std::string error;
  };
  std::optional<WriteFailure> FailingWrites() const;
  // Test-only: every write from now on fails as on a database that turned read-only
  // (SQLITE_READONLY, SQLite's query_only), or works again.
  absl::Status SetQueryOnlyForTesting(bool on);

  // Stores a new QUEUED job with its first history entry. Ids are "job-000001", "job-000002", ...
  // from SQLite's AUTOINCREMENT counter, so they grow across restarts and are never reused.
  // `owner`: the submitting certificate's name (Job.owner).
  absl::StatusOr<Job> CreateJob(const JobSpec& spec, absl::string_view reason, int64_t now_ms,
                                absl::string_view uid = "", absl::string_view owner = "");

  // Sets the job's state and reason and appends the change to its history (unless it is the
  // same state without a placement: a restated reason is no change), in one transaction
  // with the optional placement and output; the first RUNNING sets started_unix_ms and a final
  // state ended_unix_ms. NotFound for an unknown job; FailedPrecondition when the job is already
  // in a final state (final states never change).
  absl::Status UpdateState(absl::string_view job_id, JobState state, absl::string_view reason,
                           int64_t now_ms, const Placement* placement = nullptr,
                           const std::string* output = nullptr);
  absl::Status SetPlacement(absl::string_view job_id, const Placement& placement);
  absl::Status SetOutput(absl::string_view job_id, absl::string_view output);
  absl::Status SetOutputHost(absl::string_view job_id, absl::string_view host);
  // How the job succeeded (Job.end_reason), set before it enters SUCCEEDED.
  absl::Status SetEndReason(absl::string_view job_id, EndReason reason);
  // The job's directory as its rank 0 resolved it (Job.checkpoint.dir/host/interval_steps) and
  // the step it resumed from (Job.resumed_from_step).
  absl::Status SetLocation(absl::string_view job_id, const std::string& dir,
                           const std::string& host, int64_t interval_steps,
                           int64_t resumed_from_step);
  // A checkpoint step every rank skipped (Job.checkpoint.last_skipped_step, last_skip_reason).
  absl::Status SetCheckpointSkipped(absl::string_view job_id, int64_t step,
                                    const std::string& reason);
  // Replaces the job's spec (a change of JobSpec.priority). NotFound for an unknown job.
  absl::Status SetSpec(absl::string_view job_id, const JobSpec& spec);
  // Replaces the job's recoveries (Job.recoveries). NotFound for an unknown job.
  absl::Status SetRecoveries(absl::string_view job_id, absl::Span<const Recovery> recoveries);
  // Records a sealed checkpoint step; Job.checkpoint.last_sealed_step follows the highest.
  // `kept`: the sealed steps in the step's job directory after its retention (from the
  // worker's listing); the rows of that directory's other steps go in the same transaction.
  // Empty: none go.
  absl::Status AddCheckpoint(absl::string_view job_id, const CheckpointInfo& sealed,
                             absl::Span<const int64_t> kept = {});
  // Sealed steps, oldest first. NotFound for an unknown job.
  absl::StatusOr<std::vector<CheckpointInfo>> Checkpoints(absl::string_view job_id);

  // Records steps in increasing order in one transaction (a step reported again replaces the
  // earlier row) and makes the last the job's `latest`; with `drop_later`, the rows of steps
  // after the first go first, in the same transaction (the first step of a recovery's run,
  // which redoes them). NotFound for an unknown job.
  absl::Status AppendMetrics(absl::string_view job_id, absl::Span<const StepMetrics> steps,
                             bool drop_later = false);
  absl::Status AppendMetrics(absl::string_view job_id, const StepMetrics& step,
                             bool drop_later = false) {
    return AppendMetrics(job_id, absl::MakeConstSpan(&step, 1), drop_later);
  }
  // Appends a line to the job's log (an event); returns its seq. NotFound for an unknown job.
  // With `mark`, the worker's report number is kept with it (ReportMarks): the highest of its
  // session, or this one where the session is new.
  absl::StatusOr<int64_t> AppendEvent(absl::string_view job_id, absl::string_view text,
                                      int64_t now_ms, const LineSource& source = {},
                                      const ReportMark* mark = nullptr);
  // Log lines with seq > after_seq in order, at most `limit`; with `rank`, only that rank's.
  // NotFound for an unknown job.
  absl::StatusOr<std::vector<LogEntry>> LogsAfter(absl::string_view job_id, int64_t after_seq,
                                                  std::optional<int> rank, int limit = 1000);

  // NotFound for an unknown job. History is filled only when asked for.
  absl::StatusOr<Job> GetJob(absl::string_view job_id, bool with_history = true);
  // A page of summaries, newest first: no history or placement, the spec's summary (name,
  // steps, device, layout) instead of the spec. At most `limit` (<= 0 means 100); only `states`
  // when not empty; only jobs older than before_seq when it is > 0 (a previous page's
  // next_before_seq); only jobs whose spec.name is `name` when set, and only those of `owner`
  // when set (both indexed). Never reads a spec.
  absl::StatusOr<JobPage> ListJobs(int limit, absl::Span<const JobState> states = {},
                                   int64_t before_seq = 0,
                                   std::optional<absl::string_view> name = std::nullopt,
                                   std::optional<absl::string_view> owner = std::nullopt);
  // Jobs in any of `states`, oldest first, without history (startup recovery, scheduling).
  absl::StatusOr<std::vector<Job>> JobsInStates(absl::Span<const JobState> states);
  // How many jobs are in each state (states without jobs are absent); one indexed query.
  absl::StatusOr<std::map<JobState, int64_t>> CountByState();

  // Deletes an ended job's rows from every table and, when `removal` is set, records it in the
  // same transaction. NotFound for an unknown job; FailedPrecondition for one not ended. Ids
  // are never reused (AUTOINCREMENT keeps counting).
  absl::Status DeleteJob(absl::string_view job_id, const PendingDirRemoval* removal = nullptr);
  // The removals recorded by DeleteJob and not yet done, oldest first.
  absl::StatusOr<std::vector<PendingDirRemoval>> PendingDirRemovals();
  // A worker reported what it did with the job's directory: the removal is forgotten.
  absl::Status DirRemovalDone(absl::string_view job_id);
  // Drained workers (DrainWorker), by the session that was drained: a drain outlives a
  // coordinator restart (that session, registering again, is drained again) but not the
  // worker's own (a new session is back from maintenance). `drained` false forgets the worker.
  absl::Status SetDrained(absl::string_view worker_id, absl::string_view session_id, bool drained,
                          int64_t time_ms);
  // Worker id -> the session drained.
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> DrainedWorkers();
  // Every worker's mark kept by AppendEvent (one per worker id: its newest session's).
  absl::StatusOr<std::vector<ReportMark>> ReportMarks();
  // Ids of jobs that ended before `before_ms` (ended_ms), the earliest first, at most `limit`.
  absl::StatusOr<std::vector<std::string>> EndedBefore(int64_t before_ms, int limit);

  // Steps with step > after_step in step order, at most `limit`.
  absl::StatusOr<std::vector<StepMetrics>> MetricsAfter(absl::string_view job_id,
                                                        int64_t after_step, int limit = 1000);
  // How many steps are recorded in (after_step, until_step], and the first and last of them.
  absl::StatusOr<MetricsExtent> MetricsExtentOf(absl::string_view job_id, int64_t after_step,
                                                int64_t until_step);
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
  JobStore(std::string path, sqlite3* db, int lock_fd)
      : path_(std::move(path)), db_(db), lock_fd_(lock_fd) {}

  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Error(absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckJobExists(absl::string_view job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Schema 3 -> 4: name and summary of every job from its spec.
  absl::Status FillSummariesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AppendEvent's mark, inside its transaction.
  absl::Status KeepReportMarkLocked(const ReportMark& mark) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<CheckpointStatus> CheckpointStatusLocked(absl::string_view job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteCheckpointStatusLocked(absl::string_view job_id, const CheckpointStatus& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT, rolling back when it fails.
  template <typename F>
  absl::Status Transaction(F body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Records whether a transaction's BEGIN or COMMIT worked (FailingWrites).
  void NoteWrite(const absl::Status& status);

  const std::string path_;
  mutable absl::Mutex health_mu_;  // guards failing_ alone: FailingWrites never waits on a write
  std::optional<WriteFailure> failing_ ABSL_GUARDED_BY(health_mu_);
  absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  const int lock_fd_;  // holds the flock on <path>.lock
};

// The database errors this process has met since it started (every JobStore's), by kind:
// "full" (SQLITE_FULL: its disk), "corrupt", "busy" (locked), "other". For
// dtrain_coordinator_db_errors_total.
std::map<std::string, int64_t> DatabaseErrorCounts();
// Whether `status` is the database's own refusal (full, locked, read-only, damaged, an I/O
// error: SQLite's code mapped as the errors above say), not the store's answer about what was
// asked (NotFound "no job X", a final state). Marked with a payload where it is made, not read
// from the text.
bool IsDatabaseError(const absl::Status& status);
// Where database errors are logged (the coordinator's log): the first one, then at most a line a
// minute, with the count since the last. Unset: not logged (they are still counted).
void SetDatabaseErrorLog(std::function<void(absl::string_view)> sink);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_STORE_H_
