// JobStore's reads: a job, listings, the history, metrics, logs and events of a job, and what
// the coordinator reloads (drained workers, directories still to remove, ended jobs to delete).
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "coordinator/job_store.h"
#include "coordinator/job_store_internal.h"

namespace dtrain::coordinator {

absl::Status ParseInto(const std::string& bytes, google::protobuf::MessageLite* message,
                       absl::string_view job_id, absl::string_view column) {
  if (message->ParseFromString(bytes)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(job_id, ": stored ", column, " does not parse"));
}

// A row of kJobColumns (or kSummaryColumns) from column `first` on.
absl::StatusOr<Job> ReadJob(Statement& s, int first) {
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

absl::StatusOr<std::vector<ReportMark>> JobStore::ReportMarks() {
  absl::MutexLock lock(&mu_);
  Statement s(db_, path_, "SELECT worker_id, session_id, seq FROM report_marks");
  std::vector<ReportMark> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Text(0), s.Text(1), static_cast<uint64_t>(s.Int(2))});
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
