// What JobStore's sources share (job_store.cc, job_store_open.cc, job_store_read.cc): the
// columns a job is read with, the row parser, a spec's listing summary, and JobStore's
// transaction. Internal to the job_store library.
#ifndef DTRAIN_COORDINATOR_JOB_STORE_INTERNAL_H_
#define DTRAIN_COORDINATOR_JOB_STORE_INTERNAL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/job_store.h"
#include "coordinator/sqlite_statement.h"
#include "google/protobuf/message_lite.h"
#include "proto/job.pb.h"

namespace dtrain::coordinator {

inline constexpr const char* kJobColumns =
    "id, (SELECT spec FROM job_specs WHERE job_specs.seq = jobs.seq), state, reason, "
    "submitted_ms, placement, latest, output, uid, started_ms, ended_ms, "
    "output_host, checkpoint, resumed_from_step, recoveries, end_reason, owner";
// The same columns for a listing: the spec's summary in its place, no placement.
inline constexpr const char* kSummaryColumns =
    "id, summary, state, reason, submitted_ms, NULL, latest, output, uid, started_ms, ended_ms, "
    "output_host, checkpoint, resumed_from_step, recoveries, end_reason, owner";

// Parses a stored proto column; DataLoss naming the job and the column when it does not parse.
absl::Status ParseInto(const std::string& bytes, google::protobuf::MessageLite* message,
                       absl::string_view job_id, absl::string_view column);
// A row of kJobColumns (or kSummaryColumns) from column `first` on.
absl::StatusOr<Job> ReadJob(Statement& s, int first = 0);
// What a listing shows of a spec (ListJobsResponse): its name (cut to the cap a submit holds
// it to), steps, device, priority and layout, without stage_layers.
JobSpec SpecSummary(const JobSpec& spec);

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

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_STORE_INTERNAL_H_
