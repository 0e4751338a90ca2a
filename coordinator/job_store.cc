#include "coordinator/job_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "plan/spec_bounds.h"

namespace dtrain::coordinator {
namespace {

constexpr int kSchemaVersion = 9;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  spec BLOB NOT NULL,
  state INTEGER NOT NULL,
  reason TEXT NOT NULL,
  submitted_ms INTEGER NOT NULL,
  placement BLOB,
  latest BLOB,
  output TEXT NOT NULL DEFAULT '',
  uid TEXT NOT NULL DEFAULT '',
  started_ms INTEGER NOT NULL DEFAULT 0,
  ended_ms INTEGER NOT NULL DEFAULT 0,
  output_host TEXT NOT NULL DEFAULT '',
  checkpoint BLOB,
  resumed_from_step INTEGER NOT NULL DEFAULT 0,
  recoveries BLOB,
  name TEXT NOT NULL DEFAULT '',
  summary BLOB,
  end_reason INTEGER NOT NULL DEFAULT 0,
  owner TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state);
CREATE INDEX IF NOT EXISTS jobs_by_name ON jobs (name, seq);
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, seq);
CREATE TABLE IF NOT EXISTS job_specs (seq INTEGER PRIMARY KEY, spec BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS state_changes (
  job_id TEXT NOT NULL, seq INTEGER NOT NULL, state INTEGER NOT NULL, reason TEXT NOT NULL,
  time_ms INTEGER NOT NULL, PRIMARY KEY (job_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS metrics (
  job_id TEXT NOT NULL, step INTEGER NOT NULL, loss REAL, grad_norm REAL, lr REAL,
  tokens_per_s REAL, time_ms INTEGER NOT NULL, val_loss REAL,
  PRIMARY KEY (job_id, step)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
  job_id TEXT NOT NULL, seq INTEGER NOT NULL, text TEXT NOT NULL, time_ms INTEGER NOT NULL,
  rank INTEGER NOT NULL DEFAULT -1, worker_id TEXT NOT NULL DEFAULT '',
  severity INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
  job_id TEXT NOT NULL, step INTEGER NOT NULL, path TEXT NOT NULL, time_ms INTEGER NOT NULL,
  PRIMARY KEY (job_id, step)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dir_removals (
  job_id TEXT PRIMARY KEY, uid TEXT NOT NULL, dir TEXT NOT NULL, host TEXT NOT NULL,
  worker_id TEXT NOT NULL, requested_ms INTEGER NOT NULL, spec_dir TEXT NOT NULL DEFAULT '')
  WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS drained_workers (
  worker_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, time_ms INTEGER NOT NULL) WITHOUT ROWID;
)sql";

// Version 1 -> 2: job times, uid, output host, checkpoint status; log columns on events.
constexpr const char* kMigrateFrom1 = R"sql(
ALTER TABLE jobs ADD COLUMN uid TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN started_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN ended_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN output_host TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN checkpoint BLOB;
ALTER TABLE jobs ADD COLUMN resumed_from_step INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN rank INTEGER NOT NULL DEFAULT -1;
ALTER TABLE events ADD COLUMN worker_id TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN severity INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS checkpoints (
  job_id TEXT NOT NULL, step INTEGER NOT NULL, path TEXT NOT NULL, time_ms INTEGER NOT NULL,
  PRIMARY KEY (job_id, step)) WITHOUT ROWID;
UPDATE meta SET value = 2 WHERE key = 'schema_version';
)sql";

// Version 2 -> 3: the job's recoveries (RecoveryList).
constexpr const char* kMigrateFrom2 = R"sql(
ALTER TABLE jobs ADD COLUMN recoveries BLOB;
UPDATE meta SET value = 3 WHERE key = 'schema_version';
)sql";

// Version 3 -> 4: the specs move to their own table (a row read for a listing no longer walks
// a megabyte of spec to reach the columns after it); the spec's name (indexed) and its summary
// for listings, which Open then fills for the jobs already there (FillSummariesLocked).
constexpr const char* kMigrateFrom3 = R"sql(
ALTER TABLE jobs ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN summary BLOB;
CREATE TABLE job_specs (seq INTEGER PRIMARY KEY, spec BLOB NOT NULL);
INSERT INTO job_specs SELECT seq, spec FROM jobs;
UPDATE jobs SET spec = x'';
UPDATE meta SET value = 4 WHERE key = 'schema_version';
)sql";

// Version 4 -> 5: the validation loss of a step (StepMetrics.val_loss; NULL: no evaluation) and
// how a job succeeded (Job.end_reason).
constexpr const char* kMigrateFrom4 = R"sql(
ALTER TABLE metrics ADD COLUMN val_loss REAL;
ALTER TABLE jobs ADD COLUMN end_reason INTEGER NOT NULL DEFAULT 0;
UPDATE meta SET value = 5 WHERE key = 'schema_version';
)sql";

// Version 5 -> 6: the directories of deleted jobs still to be removed (kSchema creates the
// dir_removals table).
constexpr const char* kMigrateFrom5 = R"sql(
UPDATE meta SET value = 6 WHERE key = 'schema_version';
)sql";

// Version 6 -> 7: who submitted each job (Job.owner: its certificate's name; '' for the jobs
// before, which no user owns).
constexpr const char* kMigrateFrom6 = R"sql(
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
UPDATE meta SET value = 7 WHERE key = 'schema_version';
)sql";

// Version 7 -> 8: the listing's summary of a spec holds its priority; Open fills the summaries
// of the jobs already there again (FillSummariesLocked).
constexpr const char* kMigrateFrom7 = R"sql(
UPDATE meta SET value = 8 WHERE key = 'schema_version';
)sql";

// Version 8 -> 9: the drained workers, by session (kSchema creates the drained_workers table).
constexpr const char* kMigrateFrom8 = R"sql(
UPDATE meta SET value = 9 WHERE key = 'schema_version';
)sql";

constexpr const char* kJobColumns =
    "id, (SELECT spec FROM job_specs WHERE job_specs.seq = jobs.seq), state, reason, "
    "submitted_ms, placement, latest, output, uid, started_ms, ended_ms, "
    "output_host, checkpoint, resumed_from_step, recoveries, end_reason, owner";
// The same columns for a listing: the spec's summary in its place, no placement.
constexpr const char* kSummaryColumns =
    "id, summary, state, reason, submitted_ms, NULL, latest, output, uid, started_ms, ended_ms, "
    "output_host, checkpoint, resumed_from_step, recoveries, end_reason, owner";

// What DatabaseErrorCounts reports, counted as the errors are made.
std::atomic<int64_t> errors_full{0}, errors_corrupt{0}, errors_busy{0}, errors_other{0};

// SetDatabaseErrorLog's sink: the first error, then at most one line a minute with the count.
struct ErrorLog {
  absl::Mutex mu;
  std::function<void(absl::string_view)> sink ABSL_GUARDED_BY(mu);
  absl::Time last ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  int64_t since_last ABSL_GUARDED_BY(mu) = 0;
};
ErrorLog& TheErrorLog() {
  static ErrorLog* log = new ErrorLog;
  return *log;
}

void LogDatabaseError(absl::string_view text) {
  ErrorLog& log = TheErrorLog();
  absl::MutexLock lock(&log.mu);
  ++log.since_last;
  const absl::Time now = absl::Now();
  if (!log.sink || now - log.last < absl::Minutes(1)) return;
  log.sink(log.last == absl::InfinitePast()
               ? std::string(text)
               : absl::StrCat(text, " (", log.since_last,
                              " database errors since the last "
                              "such line; dtrain_coordinator_db_errors_total)"));
  log.last = now;
  log.since_last = 0;
}

constexpr char kDatabaseErrorPayload[] = "dtrain.coordinator/database-error";

absl::Status SqliteStatus(int code, const std::string& text) {
  switch (code & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      errors_corrupt.fetch_add(1, std::memory_order_relaxed);
      return absl::DataLossError(text);
    case SQLITE_FULL:
      errors_full.fetch_add(1, std::memory_order_relaxed);
      return absl::ResourceExhaustedError(text);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      errors_busy.fetch_add(1, std::memory_order_relaxed);
      return absl::UnavailableError(text);
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      errors_other.fetch_add(1, std::memory_order_relaxed);
      return absl::FailedPreconditionError(text);
    default:
      errors_other.fetch_add(1, std::memory_order_relaxed);
      return absl::InternalError(text);
  }
}

absl::Status SqliteError(int code, absl::string_view path, absl::string_view what,
                         absl::string_view message) {
  const std::string text = absl::StrCat("coordinator db ", path, ": ", what, ": ", message);
  LogDatabaseError(text);
  absl::Status status = SqliteStatus(code, text);
  status.SetPayload(kDatabaseErrorPayload, absl::Cord("sqlite"));  // IsDatabaseError
  return status;
}

// A prepared statement, finalized on destruction. Errors carry the database path.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
    code_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  absl::Status status() const {
    if (code_ == SQLITE_OK) return absl::OkStatus();
    return SqliteError(code_, path_, "cannot read it", sqlite3_errmsg(db_));
  }
  Statement& Bind(int i, int64_t v) { return Check(sqlite3_bind_int64(stmt_, i, v)); }
  Statement& Bind(int i, double v) { return Check(sqlite3_bind_double(stmt_, i, v)); }
  Statement& BindNull(int i) { return Check(sqlite3_bind_null(stmt_, i)); }
  bool IsNull(int col) { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  Statement& Bind(int i, absl::string_view v) {
    return Check(
        sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Statement& BindBlob(int i, const std::string& v) {
    return Check(
        sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  // True while a row is available; false when done.
  absl::StatusOr<bool> Step() {
    if (code_ != SQLITE_OK) return status();
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(rc, path_, sqlite3_sql(stmt_), sqlite3_errmsg(db_));
  }
  absl::Status Run() { return Step().status(); }
  // Ready to run again with new bindings (a statement run once per row of a batch).
  Statement& Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    return *this;
  }

  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) { return sqlite3_column_double(stmt_, col); }
  std::string Text(int col) {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    return p == nullptr
               ? ""
               : std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col));
  }
  std::string Blob(int col) {
    const void* p = sqlite3_column_blob(stmt_, col);
    return p == nullptr
               ? ""
               : std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, col));
  }

 private:
  Statement& Check(int rc) {
    if (code_ == SQLITE_OK && rc != SQLITE_OK) code_ = rc;
    return *this;
  }
  sqlite3* db_;
  const std::string& path_;
  sqlite3_stmt* stmt_ = nullptr;
  int code_ = SQLITE_OK;
};

absl::Status ParseInto(const std::string& bytes, google::protobuf::MessageLite* message,
                       absl::string_view job_id, absl::string_view column) {
  if (message->ParseFromString(bytes)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(job_id, ": stored ", column, " does not parse"));
}

// A row of kJobColumns (or kSummaryColumns) from column `first` on.
absl::StatusOr<Job> ReadJob(Statement& s, int first = 0) {
  Job job;
  job.set_id(s.Text(first));
  RETURN_IF_ERROR(ParseInto(s.Blob(first + 1), job.mutable_spec(), job.id(), "spec"));
  job.set_state(static_cast<JobState>(s.Int(first + 2)));
  job.set_reason(s.Text(first + 3));
  job.set_submitted_unix_ms(s.Int(first + 4));
  RETURN_IF_ERROR(ParseInto(s.Blob(first + 5), job.mutable_placement(), job.id(), "placement"));
  RETURN_IF_ERROR(ParseInto(s.Blob(first + 6), job.mutable_latest(), job.id(), "latest"));
  job.set_output(s.Text(first + 7));
  job.set_uid(s.Text(first + 8));
  job.set_started_unix_ms(s.Int(first + 9));
  job.set_ended_unix_ms(s.Int(first + 10));
  job.set_output_host(s.Text(first + 11));
  RETURN_IF_ERROR(ParseInto(s.Blob(first + 12), job.mutable_checkpoint(), job.id(), "checkpoint"));
  job.set_resumed_from_step(s.Int(first + 13));
  RecoveryList recoveries;
  RETURN_IF_ERROR(ParseInto(s.Blob(first + 14), &recoveries, job.id(), "recoveries"));
  job.mutable_recoveries()->Swap(recoveries.mutable_recoveries());
  job.set_end_reason(static_cast<EndReason>(s.Int(first + 15)));
  job.set_owner(s.Text(first + 16));
  return job;
}

// What a listing shows of a spec (ListJobsResponse): its name (cut to the cap a submit holds
// it to), steps, device, priority and layout, without stage_layers.
JobSpec SpecSummary(const JobSpec& spec) {
  JobSpec summary;
  summary.set_name(spec.name().substr(0, plan::SpecStringCap("name")));
  summary.set_steps(spec.steps());
  summary.set_priority(spec.priority());
  summary.set_device(spec.device().substr(0, plan::SpecStringCap("device")));
  *summary.mutable_parallel() = spec.parallel();
  summary.mutable_parallel()->clear_stage_layers();
  summary.mutable_parallel()->set_schedule(
      spec.parallel().schedule().substr(0, plan::SpecStringCap("schedule")));
  return summary;
}

}  // namespace

namespace {

// Takes the exclusive lock on `<path>.lock` and writes `owner` into it; returns its fd.
absl::StatusOr<int> LockDatabase(const std::string& path, const std::string& owner) {
  const std::string lock_path = path + ".lock";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("coordinator db ", path, ": cannot open ",
                                                      lock_path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[512] = {0};
    const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat("coordinator db ", path, ": cannot lock ",
                                                        lock_path, ": ", std::strerror(err)));
    }
    std::string who(holder, n > 0 ? n : 0);
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    return absl::FailedPreconditionError(absl::StrCat(
        "coordinator db ", path, " is in use by another coordinator (",
        who.empty() ? "its pid is not recorded" : who,
        "): two coordinators on one database would each schedule its jobs; stop that one "
        "first, or give this one another --db"));
  }
  if (ftruncate(fd, 0) != 0 || pwrite(fd, owner.data(), owner.size(), 0) < 0) {
    // The lock holds all the same; only the description for a second coordinator is missing.
  }
  return fd;
}

// Creates the database file 0600 (read and write for the coordinator's user only: it holds
// every run's peer secret) or narrows an existing one, its WAL and shared-memory files and
// lock to 0600. SQLite creates the -wal and -shm files with the database file's mode.
absl::Status OwnerOnly(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("coordinator db ", path, ": cannot open: ", std::strerror(errno)));
  }
  const int rc = fchmod(fd, 0600);
  const int err = errno;
  close(fd);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("coordinator db ", path, ": cannot make it 0600: ", std::strerror(err)));
  }
  for (const char* suffix : {"-wal", "-shm", ".lock"}) {
    const std::string other = path + suffix;
    if (chmod(other.c_str(), 0600) != 0 && errno != ENOENT) {
      return absl::FailedPreconditionError(absl::StrCat("coordinator db ", path, ": cannot make ",
                                                        other, " 0600: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// Refuses a damaged file (quick_check) and some other program's database (tables, but no meta
// table): nothing is added to either.
absl::Status CheckUsable(sqlite3* db, const std::string& path) {
  {
    Statement s(db, path, "PRAGMA quick_check(1)");
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row || s.Text(0) != "ok") {
      return absl::DataLossError(absl::StrCat(
          "coordinator db ", path, ": damaged (quick_check: ", row ? s.Text(0) : "no answer", ")"));
    }
  }
  Statement s(db, path,
              "SELECT (SELECT COUNT(*) FROM sqlite_master WHERE type='table'), "
              "(SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='meta')");
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (row && s.Int(0) > 0 && s.Int(1) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "coordinator db ", path, ": an SQLite database, but not a dtrain coordinator's"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path,
                                                         const std::string& owner) {
  ASSIGN_OR_RETURN(const int lock_fd, LockDatabase(path, owner));
  if (absl::Status s = OwnerOnly(path); !s.ok()) {
    close(lock_fd);
    return s;
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = SqliteError(rc, path, "cannot open",
                                      db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    close(lock_fd);
    return status;
  }
  std::unique_ptr<JobStore> store(new JobStore(path, db, lock_fd));
  absl::MutexLock lock(&store->mu_);
  // Another process (an operator's sqlite3 shell) may hold a lock briefly.
  sqlite3_busy_timeout(db, 5000);
  {
    Statement s(db, path, "PRAGMA journal_mode=WAL");
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row || s.Text(0) != "wal") {
      return absl::FailedPreconditionError(
          absl::StrCat("coordinator db ", path, ": cannot switch to WAL journal mode"));
    }
  }
  RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=FULL"));
  RETURN_IF_ERROR(CheckUsable(db, path));
  RETURN_IF_ERROR(store->Transaction([&]() -> absl::Status {
    {
      // A version-1 or -2 database gains its new columns before kSchema (which would skip the
      // existing tables) runs.
      Statement old(db, path,
                    "SELECT value FROM meta WHERE key = 'schema_version' AND EXISTS "
                    "(SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta')");
      if (old.status().ok()) {
        ASSIGN_OR_RETURN(bool row, old.Step());
        const int64_t version = row ? old.Int(0) : 0;
        if (version == 1) RETURN_IF_ERROR(store->Exec(kMigrateFrom1));
        if (version == 1 || version == 2) RETURN_IF_ERROR(store->Exec(kMigrateFrom2));
        if (version >= 1 && version <= 3) RETURN_IF_ERROR(store->Exec(kMigrateFrom3));
        if (version >= 1 && version <= 4) RETURN_IF_ERROR(store->Exec(kMigrateFrom4));
        if (version >= 1 && version <= 5) RETURN_IF_ERROR(store->Exec(kMigrateFrom5));
        if (version >= 1 && version <= 6) RETURN_IF_ERROR(store->Exec(kMigrateFrom6));
        if (version >= 1 && version <= 7) {
          RETURN_IF_ERROR(store->Exec(kMigrateFrom7));
          RETURN_IF_ERROR(store->FillSummariesLocked());
        }
        if (version >= 1 && version <= 8) RETURN_IF_ERROR(store->Exec(kMigrateFrom8));
      }
    }
    RETURN_IF_ERROR(store->Exec(kSchema));
    Statement insert(db, path, "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)");
    RETURN_IF_ERROR(insert.Bind(1, int64_t{kSchemaVersion}).Run());
    Statement version(db, path, "SELECT value FROM meta WHERE key = 'schema_version'");
    ASSIGN_OR_RETURN(bool row, version.Step());
    if (!row || version.Int(0) != kSchemaVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat("coordinator db ", path, ": schema version ", row ? version.Int(0) : 0,
                       ", this coordinator reads version ", kSchemaVersion));
    }
    return absl::OkStatus();
  }));
  return store;
}

JobStore::~JobStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);  // checkpoints the WAL into the main file when it is the last connection
  close(lock_fd_);     // releases the lock
}

absl::Status JobStore::Exec(const char* sql) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &message);
  if (rc == SQLITE_OK) return absl::OkStatus();
  absl::Status status =
      SqliteError(rc, path_, sql, message != nullptr ? message : sqlite3_errstr(rc));
  sqlite3_free(message);
  return status;
}

absl::Status JobStore::Error(absl::string_view what) {
  return SqliteError(sqlite3_errcode(db_), path_, what, sqlite3_errmsg(db_));
}

template <typename F>
absl::Status JobStore::Transaction(F body) {
  absl::Status status = Exec("BEGIN IMMEDIATE");
  if (!status.ok()) {
    NoteWrite(status);
    return status;
  }
  status = body();
  if (!status.ok()) {
    Exec("ROLLBACK").IgnoreError();
    // A full disk can refuse an INSERT before the COMMIT (the WAL cannot grow), a read-only or
    // damaged database, a lock or an I/O error any statement; an unknown job or a final state is
    // what the write asked being refused, not the database's health.
    if (IsDatabaseError(status)) NoteWrite(status);
    return status;
  }
  status = Exec("COMMIT");
  if (!status.ok()) Exec("ROLLBACK").IgnoreError();
  NoteWrite(status);
  return status;
}

void JobStore::NoteWrite(const absl::Status& status) {
  absl::MutexLock lock(&health_mu_);
  if (status.ok()) {
    failing_.reset();
  } else if (failing_.has_value()) {
    failing_->error = std::string(status.message());
  } else {
    failing_ = WriteFailure{absl::Now(), std::string(status.message())};
  }
}

absl::Status JobStore::SetQueryOnlyForTesting(bool on) {
  absl::MutexLock lock(&mu_);
  return Exec(on ? "PRAGMA query_only = ON" : "PRAGMA query_only = OFF");
}

std::optional<JobStore::WriteFailure> JobStore::FailingWrites() const {
  absl::MutexLock lock(&health_mu_);
  return failing_;
}

absl::Status JobStore::CheckJobExists(absl::string_view job_id) {
  Statement s(db_, path_, "SELECT 1 FROM jobs WHERE id = ?");
  ASSIGN_OR_RETURN(bool row, s.Bind(1, job_id).Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return absl::OkStatus();
}

absl::StatusOr<Job> JobStore::CreateJob(const JobSpec& spec, absl::string_view reason,
                                        int64_t now_ms, absl::string_view uid,
                                        absl::string_view owner) {
  absl::MutexLock lock(&mu_);
  std::string id;
  RETURN_IF_ERROR(Transaction([&]() -> absl::Status {
    Statement insert(db_, path_,
                     "INSERT INTO jobs (id, spec, state, reason, submitted_ms, uid, name, summary, "
                     "owner) VALUES ('', ?, ?, ?, ?, ?, ?, ?, ?)");
    RETURN_IF_ERROR(insert.BindBlob(1, "")
                        .Bind(2, int64_t{QUEUED})
                        .Bind(3, reason)
                        .Bind(4, now_ms)
                        .Bind(5, uid)
                        .Bind(6, spec.name())
                        .BindBlob(7, SpecSummary(spec).SerializeAsString())
                        .Bind(8, owner)
                        .Run());
    const int64_t seq = sqlite3_last_insert_rowid(db_);
    id = JobIdFor(seq);
    Statement spec_row(db_, path_, "INSERT INTO job_specs VALUES (?, ?)");
    RETURN_IF_ERROR(spec_row.Bind(1, seq).BindBlob(2, spec.SerializeAsString()).Run());
    Statement name(db_, path_, "UPDATE jobs SET id = ? WHERE seq = ?");
    RETURN_IF_ERROR(name.Bind(1, id).Bind(2, seq).Run());
    Statement history(db_, path_, "INSERT INTO state_changes VALUES (?, 1, ?, ?, ?)");
    return history.Bind(1, id).Bind(2, int64_t{QUEUED}).Bind(3, reason).Bind(4, now_ms).Run();
  }));
  Job job;
  job.set_id(id);
  *job.mutable_spec() = spec;
  job.set_state(QUEUED);
  job.set_reason(std::string(reason));
  job.set_submitted_unix_ms(now_ms);
  job.set_uid(std::string(uid));
  job.set_owner(std::string(owner));
  StateChange* change = job.add_history();
  change->set_state(QUEUED);
  change->set_reason(std::string(reason));
  change->set_time_unix_ms(now_ms);
  return job;
}

absl::Status JobStore::UpdateState(absl::string_view job_id, JobState state,
                                   absl::string_view reason, int64_t now_ms,
                                   const Placement* placement, const std::string* output) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    Statement current(db_, path_, "SELECT state FROM jobs WHERE id = ?");
    ASSIGN_OR_RETURN(bool row, current.Bind(1, job_id).Step());
    if (!row) return absl::NotFoundError(absl::StrCat("no job ", job_id));
    const auto from = static_cast<JobState>(current.Int(0));
    if (absl::Status allowed = CheckTransition(from, state); !allowed.ok()) {
      return absl::Status(allowed.code(), absl::StrCat(job_id, ": ", allowed.message()));
    }
    // started_ms: the first RUNNING; ended_ms: the final state.
    Statement update(db_, path_,
                     "UPDATE jobs SET state = ?, reason = ?, "
                     "started_ms = CASE WHEN ? AND started_ms = 0 THEN ? ELSE started_ms END, "
                     "ended_ms = CASE WHEN ? THEN ? ELSE ended_ms END WHERE id = ?");
    RETURN_IF_ERROR(update.Bind(1, int64_t{state})
                        .Bind(2, reason)
                        .Bind(3, int64_t{state == RUNNING})
                        .Bind(4, now_ms)
                        .Bind(5, int64_t{IsFinal(state)})
                        .Bind(6, now_ms)
                        .Bind(7, job_id)
                        .Run());
    // The history records changes: the same state again with a new reason (a queued job's
    // wait, restated whenever the idle workers change) only updates the job's reason.
    if (state != from || placement != nullptr) {
      Statement history(db_, path_,
                        "INSERT INTO state_changes SELECT ?, IFNULL(MAX(seq), 0) + 1, ?, ?, ? "
                        "FROM state_changes WHERE job_id = ?");
      RETURN_IF_ERROR(history.Bind(1, job_id)
                          .Bind(2, int64_t{state})
                          .Bind(3, reason)
                          .Bind(4, now_ms)
                          .Bind(5, job_id)
                          .Run());
    }
    if (placement != nullptr) {
      Statement s(db_, path_, "UPDATE jobs SET placement = ? WHERE id = ?");
      RETURN_IF_ERROR(s.BindBlob(1, placement->SerializeAsString()).Bind(2, job_id).Run());
    }
    if (output != nullptr) {
      Statement s(db_, path_, "UPDATE jobs SET output = ? WHERE id = ?");
      RETURN_IF_ERROR(s.Bind(1, *output).Bind(2, job_id).Run());
    }
    return absl::OkStatus();
  });
}

absl::Status JobStore::SetEndReason(absl::string_view job_id, EndReason reason) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckJobExists(job_id));
  Statement s(db_, path_, "UPDATE jobs SET end_reason = ? WHERE id = ?");
  return s.Bind(1, int64_t{reason}).Bind(2, job_id).Run();
}

absl::Status JobStore::SetOutputHost(absl::string_view job_id, absl::string_view host) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckJobExists(job_id));
  Statement s(db_, path_, "UPDATE jobs SET output_host = ? WHERE id = ?");
  return s.Bind(1, host).Bind(2, job_id).Run();
}

absl::StatusOr<CheckpointStatus> JobStore::CheckpointStatusLocked(absl::string_view job_id) {
  Statement s(db_, path_, "SELECT checkpoint FROM jobs WHERE id = ?");
  ASSIGN_OR_RETURN(bool row, s.Bind(1, job_id).Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  CheckpointStatus status;
  RETURN_IF_ERROR(ParseInto(s.Blob(0), &status, job_id, "checkpoint"));
  return status;
}

absl::Status JobStore::WriteCheckpointStatusLocked(absl::string_view job_id,
                                                   const CheckpointStatus& status) {
  Statement s(db_, path_, "UPDATE jobs SET checkpoint = ? WHERE id = ?");
  return s.BindBlob(1, status.SerializeAsString()).Bind(2, job_id).Run();
}

absl::Status JobStore::SetLocation(absl::string_view job_id, const std::string& dir,
                                   const std::string& host, int64_t interval_steps,
                                   int64_t resumed_from_step) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(CheckpointStatus status, CheckpointStatusLocked(job_id));
    status.set_dir(dir);
    status.set_host(host);
    status.set_interval_steps(interval_steps);
    RETURN_IF_ERROR(WriteCheckpointStatusLocked(job_id, status));
    Statement s(db_, path_, "UPDATE jobs SET resumed_from_step = ? WHERE id = ?");
    return s.Bind(1, resumed_from_step).Bind(2, job_id).Run();
  });
}

absl::Status JobStore::SetCheckpointSkipped(absl::string_view job_id, int64_t step,
                                            const std::string& reason) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(CheckpointStatus status, CheckpointStatusLocked(job_id));
    status.set_last_skipped_step(step);
    status.set_last_skip_reason(reason);
    return WriteCheckpointStatusLocked(job_id, status);
  });
}

absl::Status JobStore::SetRecoveries(absl::string_view job_id,
                                     absl::Span<const Recovery> recoveries) {
  RecoveryList list;
  for (const Recovery& r : recoveries) *list.add_recoveries() = r;
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckJobExists(job_id));
  Statement s(db_, path_, "UPDATE jobs SET recoveries = ? WHERE id = ?");
  return s.BindBlob(1, list.SerializeAsString()).Bind(2, job_id).Run();
}

absl::Status JobStore::SetSpec(absl::string_view job_id, const JobSpec& spec) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckJobExists(job_id));
  return Transaction([&]() -> absl::Status {
    Statement s(db_, path_,
                "UPDATE job_specs SET spec = ? WHERE seq = (SELECT seq FROM jobs WHERE id = ?)");
    RETURN_IF_ERROR(s.BindBlob(1, spec.SerializeAsString()).Bind(2, job_id).Run());
    Statement summary(db_, path_, "UPDATE jobs SET summary = ? WHERE id = ?");
    return summary.BindBlob(1, SpecSummary(spec).SerializeAsString()).Bind(2, job_id).Run();
  });
}

absl::Status JobStore::AddCheckpoint(absl::string_view job_id, const CheckpointInfo& sealed,
                                     absl::Span<const int64_t> kept) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(CheckpointStatus status, CheckpointStatusLocked(job_id));
    if (sealed.step() > status.last_sealed_step()) {
      status.set_last_sealed_step(sealed.step());
      status.set_sealed_unix_ms(sealed.time_unix_ms());
      status.set_dir_bytes(sealed.dir_bytes());
      RETURN_IF_ERROR(WriteCheckpointStatusLocked(job_id, status));
    }
    Statement s(db_, path_, "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?)");
    RETURN_IF_ERROR(s.Bind(1, job_id)
                        .Bind(2, sealed.step())
                        .Bind(3, sealed.path())
                        .Bind(4, sealed.time_unix_ms())
                        .Run());
    if (kept.empty()) return absl::OkStatus();
    // Only this directory's rows: an earlier run's steps on another host's disk are not in
    // this listing.
    auto parent = [](absl::string_view path) { return path.substr(0, path.rfind('/')); };
    const absl::flat_hash_set<int64_t> keep(kept.begin(), kept.end());
    std::vector<int64_t> removed;
    Statement rows(db_, path_, "SELECT step, path FROM checkpoints WHERE job_id = ?");
    rows.Bind(1, job_id);
    while (true) {
      ASSIGN_OR_RETURN(bool row, rows.Step());
      if (!row) break;
      const int64_t step = rows.Int(0);
      if (step != sealed.step() && !keep.contains(step) &&
          parent(rows.Text(1)) == parent(sealed.path())) {
        removed.push_back(step);
      }
    }
    for (int64_t step : removed) {
      Statement drop(db_, path_, "DELETE FROM checkpoints WHERE job_id = ? AND step = ?");
      RETURN_IF_ERROR(drop.Bind(1, job_id).Bind(2, step).Run());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<CheckpointInfo>> JobStore::Checkpoints(absl::string_view job_id) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckJobExists(job_id));
  Statement s(db_, path_,
              "SELECT step, path, time_ms FROM checkpoints WHERE job_id = ? ORDER BY step");
  s.Bind(1, job_id);
  std::vector<CheckpointInfo> checkpoints;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    CheckpointInfo& c = checkpoints.emplace_back();
    c.set_step(s.Int(0));
    c.set_path(s.Text(1));
    c.set_time_unix_ms(s.Int(2));
  }
  return checkpoints;
}

absl::Status JobStore::SetPlacement(absl::string_view job_id, const Placement& placement) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckJobExists(job_id));
  Statement s(db_, path_, "UPDATE jobs SET placement = ? WHERE id = ?");
  return s.BindBlob(1, placement.SerializeAsString()).Bind(2, job_id).Run();
}

absl::Status JobStore::SetOutput(absl::string_view job_id, absl::string_view output) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckJobExists(job_id));
  Statement s(db_, path_, "UPDATE jobs SET output = ? WHERE id = ?");
  return s.Bind(1, output).Bind(2, job_id).Run();
}

absl::Status JobStore::AppendMetrics(absl::string_view job_id, absl::Span<const StepMetrics> steps,
                                     bool drop_later) {
  if (steps.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    Statement latest(db_, path_, "UPDATE jobs SET latest = ? WHERE id = ?");
    RETURN_IF_ERROR(latest.BindBlob(1, steps.back().SerializeAsString()).Bind(2, job_id).Run());
    if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("no job ", job_id));
    if (drop_later) {
      Statement drop(db_, path_, "DELETE FROM metrics WHERE job_id = ? AND step > ?");
      RETURN_IF_ERROR(drop.Bind(1, job_id).Bind(2, steps.front().step()).Run());
    }
    Statement insert(db_, path_, "INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    for (const StepMetrics& step : steps) {
      insert.Reset()
          .Bind(1, job_id)
          .Bind(2, step.step())
          .Bind(3, step.loss())
          .Bind(4, step.grad_norm())
          .Bind(5, step.learning_rate())
          .Bind(6, step.tokens_per_s())
          .Bind(7, step.time_unix_ms());
      if (step.has_val_loss()) {
        insert.Bind(8, step.val_loss());
      } else {
        insert.BindNull(8);
      }
      RETURN_IF_ERROR(insert.Run());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<int64_t> JobStore::AppendEvent(absl::string_view job_id, absl::string_view text,
                                              int64_t now_ms, const LineSource& source) {
  absl::MutexLock lock(&mu_);
  int64_t seq = 0;
  RETURN_IF_ERROR(Transaction([&]() -> absl::Status {
    RETURN_IF_ERROR(CheckJobExists(job_id));
    Statement insert(db_, path_,
                     "INSERT INTO events SELECT ?, IFNULL(MAX(seq), 0) + 1, ?, ?, ?, ?, ? "
                     "FROM events WHERE job_id = ? RETURNING seq");
    ASSIGN_OR_RETURN(bool row, insert.Bind(1, job_id)
                                   .Bind(2, text)
                                   .Bind(3, now_ms)
                                   .Bind(4, int64_t{source.rank})
                                   .Bind(5, source.worker_id)
                                   .Bind(6, int64_t{source.severity})
                                   .Bind(7, job_id)
                                   .Step());
    if (row) seq = insert.Int(0);
    RETURN_IF_ERROR(insert.Run());  // finish the statement before COMMIT
    if (source.rank < 0) return absl::OkStatus();
    // The ranks' lines are bounded per job: drop the oldest beyond kMaxRankLinesPerJob.
    Statement trim(db_, path_,
                   "DELETE FROM events WHERE job_id = ? AND rank >= 0 AND seq <= ("
                   "SELECT seq FROM events WHERE job_id = ? AND rank >= 0 "
                   "ORDER BY seq DESC LIMIT 1 OFFSET ?)");
    return trim.Bind(1, job_id).Bind(2, job_id).Bind(3, int64_t{kMaxRankLinesPerJob}).Run();
  }));
  return seq;
}

absl::StatusOr<std::vector<LogEntry>> JobStore::LogsAfter(absl::string_view job_id,
                                                          int64_t after_seq,
                                                          std::optional<int> rank, int limit) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckJobExists(job_id));
  Statement s(db_, path_,
              "SELECT seq, time_ms, rank, worker_id, severity, text FROM events "
              "WHERE job_id = ? AND seq > ? AND (? OR rank = ?) ORDER BY seq LIMIT ?");
  s.Bind(1, job_id)
      .Bind(2, after_seq)
      .Bind(3, int64_t{!rank.has_value()})
      .Bind(4, int64_t{rank.value_or(-1)})
      .Bind(5, int64_t{limit});
  std::vector<LogEntry> lines;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    LogEntry& e = lines.emplace_back();
    e.set_seq(s.Int(0));
    e.set_time_unix_ms(s.Int(1));
    e.set_rank(static_cast<int32_t>(s.Int(2)));
    e.set_worker_id(s.Text(3));
    e.set_severity(static_cast<LogSeverity>(s.Int(4)));
    e.set_text(s.Text(5));
  }
  return lines;
}

absl::StatusOr<Job> JobStore::GetJob(absl::string_view job_id, bool with_history) {
  absl::MutexLock lock(&mu_);
  const std::string sql = absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id = ?");
  Statement s(db_, path_, sql.c_str());
  ASSIGN_OR_RETURN(bool row, s.Bind(1, job_id).Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  ASSIGN_OR_RETURN(Job job, ReadJob(s));
  if (with_history) {
    Statement h(db_, path_,
                "SELECT state, reason, time_ms FROM state_changes WHERE job_id = ? ORDER BY seq");
    h.Bind(1, job_id);
    while (true) {
      ASSIGN_OR_RETURN(bool more, h.Step());
      if (!more) break;
      StateChange* change = job.add_history();
      change->set_state(static_cast<JobState>(h.Int(0)));
      change->set_reason(h.Text(1));
      change->set_time_unix_ms(h.Int(2));
    }
    // The last evaluation and the best (lowest, earliest of equals): (step, val_loss) of the
    // first row in `order`, if any.
    auto evaluation = [&](const char* order) -> absl::StatusOr<std::optional<StepMetrics>> {
      const std::string sql = absl::StrCat(
          "SELECT step, val_loss FROM metrics WHERE job_id = ? AND val_loss IS NOT NULL ORDER BY ",
          order, " LIMIT 1");
      Statement e(db_, path_, sql.c_str());
      ASSIGN_OR_RETURN(const bool found, e.Bind(1, job_id).Step());
      if (!found) return std::nullopt;
      StepMetrics m;
      m.set_step(e.Int(0));
      m.set_val_loss(e.Double(1));
      return m;
    };
    ASSIGN_OR_RETURN(const std::optional<StepMetrics> last, evaluation("step DESC"));
    ASSIGN_OR_RETURN(const std::optional<StepMetrics> best, evaluation("val_loss, step"));
    if (last.has_value() && best.has_value()) {
      ValidationSummary* v = job.mutable_validation();
      v->set_step(last->step());
      v->set_val_loss(last->val_loss());
      v->set_best_step(best->step());
      v->set_best_val_loss(best->val_loss());
    }
  }
  return job;
}

absl::StatusOr<JobPage> JobStore::ListJobs(int limit, absl::Span<const JobState> states,
                                           int64_t before_seq,
                                           std::optional<absl::string_view> name,
                                           std::optional<absl::string_view> owner) {
  if (limit <= 0) limit = 100;
  std::vector<std::string> where;
  if (!states.empty()) {
    std::vector<std::string> numbers;
    for (JobState state : states) numbers.push_back(absl::StrCat(static_cast<int>(state)));
    where.push_back(absl::StrCat("state IN (", absl::StrJoin(numbers, ","), ")"));
  }
  if (before_seq > 0) where.push_back("seq < ?1");
  if (name.has_value()) where.push_back("name = ?2");
  if (owner.has_value()) where.push_back("owner = ?4");
  absl::MutexLock lock(&mu_);
  // One more row than asked for says whether there is a next page.
  const std::string sql =
      absl::StrCat("SELECT seq, ", kSummaryColumns, " FROM jobs",
                   where.empty() ? "" : absl::StrCat(" WHERE ", absl::StrJoin(where, " AND ")),
                   " ORDER BY seq DESC LIMIT ?3");
  Statement s(db_, path_, sql.c_str());
  if (before_seq > 0) s.Bind(1, before_seq);
  if (name.has_value()) s.Bind(2, *name);
  s.Bind(3, int64_t{limit} + 1);
  if (owner.has_value()) s.Bind(4, *owner);
  JobPage page;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    if (static_cast<int>(page.jobs.size()) == limit) {
      page.next_before_seq = s.Int(0) + 1;
      break;
    }
    ASSIGN_OR_RETURN(Job job, ReadJob(s, /*first=*/1));
    job.clear_placement();
    page.jobs.push_back(std::move(job));
  }
  return page;
}

absl::Status JobStore::FillSummariesLocked() {
  Statement s(db_, path_, "SELECT seq, spec FROM job_specs");
  struct Row {
    int64_t seq;
    std::string name;
    std::string summary;
  };
  std::vector<Row> rows;  // small: the specs are read one at a time
  while (true) {
    ASSIGN_OR_RETURN(bool more, s.Step());
    if (!more) break;
    JobSpec spec;
    RETURN_IF_ERROR(ParseInto(s.Blob(1), &spec, absl::StrCat("seq ", s.Int(0)), "spec"));
    rows.push_back({s.Int(0), spec.name(), SpecSummary(spec).SerializeAsString()});
  }
  for (const Row& row : rows) {
    Statement update(db_, path_, "UPDATE jobs SET name = ?, summary = ? WHERE seq = ?");
    RETURN_IF_ERROR(update.Bind(1, row.name).BindBlob(2, row.summary).Bind(3, row.seq).Run());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Job>> JobStore::JobsInStates(absl::Span<const JobState> states) {
  std::vector<std::string> numbers;
  for (JobState state : states) numbers.push_back(absl::StrCat(static_cast<int>(state)));
  const std::string sql = absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE state IN (",
                                       absl::StrJoin(numbers, ","), ") ORDER BY seq");
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_, sql.c_str());
  std::vector<Job> jobs;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(Job job, ReadJob(s));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<std::map<JobState, int64_t>> JobStore::CountByState() {
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_, "SELECT state, COUNT(*) FROM jobs GROUP BY state");
  std::map<JobState, int64_t> counts;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    counts[static_cast<JobState>(s.Int(0))] = s.Int(1);
  }
  return counts;
}

absl::StatusOr<std::vector<StepMetrics>> JobStore::MetricsAfter(absl::string_view job_id,
                                                                int64_t after_step, int limit) {
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_,
              "SELECT step, loss, grad_norm, lr, tokens_per_s, time_ms, val_loss FROM metrics "
              "WHERE job_id = ? AND step > ? ORDER BY step LIMIT ?");
  s.Bind(1, job_id).Bind(2, after_step).Bind(3, int64_t{limit});
  std::vector<StepMetrics> steps;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    StepMetrics& m = steps.emplace_back();
    // SQLite stores a NaN as NULL: a diverged step reads back NaN, not 0.
    auto value = [&s](int column) {
      return s.IsNull(column) ? std::numeric_limits<double>::quiet_NaN() : s.Double(column);
    };
    m.set_step(s.Int(0));
    m.set_loss(value(1));
    m.set_grad_norm(value(2));
    m.set_learning_rate(value(3));
    m.set_tokens_per_s(value(4));
    m.set_time_unix_ms(s.Int(5));
    if (!s.IsNull(6)) m.set_val_loss(s.Double(6));
  }
  return steps;
}

absl::StatusOr<MetricsExtent> JobStore::MetricsExtentOf(absl::string_view job_id,
                                                        int64_t after_step, int64_t until_step) {
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_,
              "SELECT COUNT(*), MIN(step), MAX(step) FROM metrics "
              "WHERE job_id = ? AND step > ? AND step <= ?");
  s.Bind(1, job_id).Bind(2, after_step).Bind(3, until_step);
  MetricsExtent extent;
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (row && s.Int(0) > 0) {
    extent.count = s.Int(0);
    extent.first = s.Int(1);
    extent.last = s.Int(2);
  }
  return extent;
}

absl::StatusOr<std::vector<HistoryEntry>> JobStore::HistoryAfter(absl::string_view job_id,
                                                                 int64_t after_seq) {
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_,
              "SELECT seq, state, reason, time_ms FROM state_changes "
              "WHERE job_id = ? AND seq > ? ORDER BY seq");
  s.Bind(1, job_id).Bind(2, after_seq);
  std::vector<HistoryEntry> entries;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    HistoryEntry& e = entries.emplace_back();
    e.seq = s.Int(0);
    e.change.set_state(static_cast<JobState>(s.Int(1)));
    e.change.set_reason(s.Text(2));
    e.change.set_time_unix_ms(s.Int(3));
  }
  return entries;
}

absl::StatusOr<std::vector<JobEvent>> JobStore::EventsAfter(absl::string_view job_id,
                                                            int64_t after_seq, int limit) {
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_,
              "SELECT seq, text, time_ms, rank, worker_id, severity FROM events "
              "WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?");
  s.Bind(1, job_id).Bind(2, after_seq).Bind(3, int64_t{limit});
  std::vector<JobEvent> events;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    events.push_back(JobEvent{s.Int(0), s.Text(1), s.Int(2), static_cast<int>(s.Int(3)), s.Text(4),
                              static_cast<LogSeverity>(s.Int(5))});
  }
  return events;
}

void SetDatabaseErrorLog(std::function<void(absl::string_view)> sink) {
  ErrorLog& log = TheErrorLog();
  absl::MutexLock lock(&log.mu);
  log.sink = std::move(sink);
}

bool IsDatabaseError(const absl::Status& status) {
  return status.GetPayload(kDatabaseErrorPayload).has_value();
}

std::map<std::string, int64_t> DatabaseErrorCounts() {
  return {{"full", errors_full.load(std::memory_order_relaxed)},
          {"corrupt", errors_corrupt.load(std::memory_order_relaxed)},
          {"busy", errors_busy.load(std::memory_order_relaxed)},
          {"other", errors_other.load(std::memory_order_relaxed)}};
}

absl::Status JobStore::DeleteJob(absl::string_view job_id, const PendingDirRemoval* removal) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    Statement current(db_, path_, "SELECT state FROM jobs WHERE id = ?");
    ASSIGN_OR_RETURN(bool row, current.Bind(1, job_id).Step());
    if (!row) return absl::NotFoundError(absl::StrCat("no job ", job_id));
    const auto state = static_cast<JobState>(current.Int(0));
    if (!IsFinal(state)) {
      return absl::FailedPreconditionError(
          absl::StrCat(job_id, " is ", JobState_Name(state), ": only an ended job is deleted"));
    }
    for (const char* sql :
         {"DELETE FROM job_specs WHERE seq = (SELECT seq FROM jobs WHERE id = ?)",
          "DELETE FROM state_changes WHERE job_id = ?", "DELETE FROM metrics WHERE job_id = ?",
          "DELETE FROM events WHERE job_id = ?", "DELETE FROM checkpoints WHERE job_id = ?",
          "DELETE FROM jobs WHERE id = ?"}) {
      Statement drop(db_, path_, sql);
      RETURN_IF_ERROR(drop.Bind(1, job_id).Run());
    }
    if (removal == nullptr) return absl::OkStatus();
    Statement keep(db_, path_, "INSERT OR REPLACE INTO dir_removals VALUES (?, ?, ?, ?, ?, ?, ?)");
    return keep.Bind(1, removal->job_id)
        .Bind(2, removal->uid)
        .Bind(3, removal->dir)
        .Bind(4, removal->host)
        .Bind(5, removal->worker_id)
        .Bind(6, removal->requested_ms)
        .Bind(7, removal->spec_dir)
        .Run();
  });
}

absl::StatusOr<std::vector<PendingDirRemoval>> JobStore::PendingDirRemovals() {
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_,
              "SELECT job_id, uid, dir, host, worker_id, requested_ms, spec_dir FROM dir_removals "
              "ORDER BY requested_ms, job_id");
  std::vector<PendingDirRemoval> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    PendingDirRemoval& r = out.emplace_back();
    r.job_id = s.Text(0);
    r.uid = s.Text(1);
    r.dir = s.Text(2);
    r.host = s.Text(3);
    r.worker_id = s.Text(4);
    r.requested_ms = s.Int(5);
    r.spec_dir = s.Text(6);
  }
  return out;
}

absl::Status JobStore::DirRemovalDone(absl::string_view job_id) {
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_, "DELETE FROM dir_removals WHERE job_id = ?");
  return s.Bind(1, job_id).Run();
}

absl::Status JobStore::SetDrained(absl::string_view worker_id, absl::string_view session_id,
                                  bool drained, int64_t time_ms) {
  absl::MutexLock lock(&mu_);
  if (!drained) {
    Statement s(db_, path_, "DELETE FROM drained_workers WHERE worker_id = ?");
    return s.Bind(1, worker_id).Run();
  }
  Statement s(db_, path_, "INSERT OR REPLACE INTO drained_workers VALUES (?, ?, ?)");
  return s.Bind(1, worker_id).Bind(2, session_id).Bind(3, time_ms).Run();
}

absl::StatusOr<absl::flat_hash_map<std::string, std::string>> JobStore::DrainedWorkers() {
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_, "SELECT worker_id, session_id FROM drained_workers");
  absl::flat_hash_map<std::string, std::string> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out[s.Text(0)] = s.Text(1);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> JobStore::EndedBefore(int64_t before_ms, int limit) {
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_,
              "SELECT id FROM jobs WHERE state IN (?, ?, ?) AND ended_ms > 0 AND ended_ms < ? "
              "ORDER BY ended_ms, seq LIMIT ?");
  s.Bind(1, int64_t{SUCCEEDED})
      .Bind(2, int64_t{FAILED})
      .Bind(3, int64_t{CANCELLED})
      .Bind(4, before_ms)
      .Bind(5, int64_t{limit});
  std::vector<std::string> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(s.Text(0));
  }
  return out;
}

}  // namespace dtrain::coordinator
