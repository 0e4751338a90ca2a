#include "coordinator/sqlite_statement.h"

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/job_store.h"

namespace dtrain::coordinator {
namespace {

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

}  // namespace

absl::Status SqliteError(int code, absl::string_view path, absl::string_view what,
                         absl::string_view message) {
  const std::string text = absl::StrCat("coordinator db ", path, ": ", what, ": ", message);
  LogDatabaseError(text);
  absl::Status status = SqliteStatus(code, text);
  status.SetPayload(kDatabaseErrorPayload, absl::Cord("sqlite"));  // IsDatabaseError
  return status;
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

}  // namespace dtrain::coordinator
