// JobStore::Open: the database locked for this coordinator, narrowed to its user, checked,
// migrated from older schema versions and created where new.
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "coordinator/job_store.h"
#include "coordinator/job_store_internal.h"

namespace dtrain::coordinator {
namespace {

constexpr int kSchemaVersion = 10;

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
CREATE TABLE IF NOT EXISTS report_marks (
  worker_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
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

// Version 9 -> 10: the workers' report numbers kept with their log lines (kSchema creates the
// report_marks table).
constexpr const char* kMigrateFrom9 = R"sql(
UPDATE meta SET value = 10 WHERE key = 'schema_version';
)sql";

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
        if (version >= 1 && version <= 9) RETURN_IF_ERROR(store->Exec(kMigrateFrom9));
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

}  // namespace dtrain::coordinator
