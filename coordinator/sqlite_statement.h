// SQLite under JobStore: a prepared statement that finalizes itself and whose errors carry the
// database's path, and the classification of SQLite's result codes into absl::Status (full ->
// ResourceExhausted, damaged -> DataLoss, locked -> Unavailable, read-only or unopenable ->
// FailedPrecondition), each marked as a database error (IsDatabaseError, job_store.h), counted
// (DatabaseErrorCounts) and logged (SetDatabaseErrorLog). Internal to the job_store library.
#ifndef DTRAIN_COORDINATOR_SQLITE_STATEMENT_H_
#define DTRAIN_COORDINATOR_SQLITE_STATEMENT_H_

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::coordinator {

// The status of SQLite's `code` for `what` (a statement, "cannot open") on the database at
// `path`: classified, counted, logged and marked (see the top).
absl::Status SqliteError(int code, absl::string_view path, absl::string_view what,
                         absl::string_view message);

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

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_SQLITE_STATEMENT_H_
