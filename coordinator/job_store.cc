// JobStore's writes: jobs created and moved through their states, their placement, outcome,
// checkpoints, metrics and log lines, deletions, and the drained workers; each write one
// transaction. Reads are job_store_read.cc's, opening and the schema job_store_open.cc's.
#include "coordinator/job_store.h"

#include <sqlite3.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "coordinator/job_store_internal.h"
#include "plan/spec_bounds.h"

namespace dtrain::coordinator {

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
                                              int64_t now_ms, const LineSource& source,
                                              const ReportMark* mark) {
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
    if (mark != nullptr) RETURN_IF_ERROR(KeepReportMarkLocked(*mark));
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

absl::Status JobStore::KeepReportMarkLocked(const ReportMark& mark) {
  // A new session's numbers start again (WorkerRegistry::NoteReportRecorded keeps the same).
  Statement s(db_, path_,
              "INSERT INTO report_marks VALUES (?1, ?2, ?3) ON CONFLICT (worker_id) DO UPDATE SET "
              "seq = CASE WHEN session_id = excluded.session_id THEN MAX(seq, excluded.seq) "
              "ELSE excluded.seq END, session_id = excluded.session_id");
  return s.Bind(1, mark.worker_id)
      .Bind(2, mark.session_id)
      .Bind(3, static_cast<int64_t>(mark.seq))
      .Run();
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

}  // namespace dtrain::coordinator
