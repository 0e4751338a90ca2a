// JobManager's diagnosis of a running job (Options::diagnose): once per run, when it stalls
// (no step for diagnose_stall_after) or a rank times out waiting on its peers, every rank's
// flight recorder is asked (diagnose_job.h) and the answer goes into the job's events and, should
// the run then fail, into its reason. The failure of a timed-out run waits for the answer
// (ActiveJob::DiagnosisState::Awaits, an input of job_decision.h).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"

namespace dtrain::coordinator {

void JobManager::DiagnoseStalledJobs() {
  if (!options_.diagnose) return;
  std::vector<Job> asks;
  {
    JobsLock lock(this);
    const absl::Time now = Now();
    const bool unrecorded = store_->FailingWrites().has_value();
    for (auto& [n, job] : jobs_) {
      ActiveJob::DiagnosisState& d = job.diagnosis;
      if (job.state != RUNNING || d.stall_diagnosed || job.ranks.size() < 2 ||
          job.assignment == nullptr) {
        continue;
      }
      // A last step waiting for disk space is not a stall: rank 0 said why (CheckpointWait).
      // Nor are steps that the database refuses to record (the ranks' reports wait).
      const bool stalled = options_.diagnose_stall_after > absl::ZeroDuration() &&
                           now - d.progress_at >= options_.diagnose_stall_after &&
                           !job.space_wait.has_value() && !unrecorded;
      if (!d.timeout_due && !stalled) continue;
      d.stall_diagnosed = true;
      if (d.timeout_due) {
        d.until = now + options_.diagnosis_deadline + absl::Milliseconds(250);
      } else {
        d.occasion = {DiagnosisOccasion::kStalled};
      }
      d.timeout_due = false;
      Job& ask = asks.emplace_back();
      ask.set_id(job.id);
      ask.set_state(RUNNING);
      *ask.mutable_placement() = job.assignment->placement();
    }
  }
  if (asks.empty()) return;
  const ListWorkersResponse workers = ListWorkers();
  for (const Job& ask : asks) {
    {
      absl::MutexLock lock(&wake_mu_);
      if (stop_) return;
      ++diagnosing_;
    }
    options_.diagnose(
        ask, workers, [this, id = ask.id()] { return TimedOutRanks(id); },
        [this, id = ask.id()](std::string summary) {
          RecordStallDiagnosis(id, std::move(summary));
          absl::MutexLock lock(&wake_mu_);
          --diagnosing_;
        });
  }
}

void JobManager::RecordStallDiagnosis(const std::string& job_id, std::string summary) {
  JobsLock lock(this);
  ActiveJob* job = FindActive(job_id);
  if (job == nullptr || job->state != RUNNING || !job->diagnosis.stall_diagnosed) return;
  // The occasion in the events: "no step for 30s: root: ...", "rank 0 (w1) timed out: root:".
  const std::string text = absl::StrCat(
      job->diagnosis.occasion.kind == DiagnosisOccasion::kStalled
          ? absl::StrCat("no step for ", absl::FormatDuration(options_.diagnose_stall_after))
          : job->diagnosis.occasion.Describe(),
      ": ", summary);
  Log(absl::StrCat(job_id, ": ", text));
  Event(job_id, text);
  job->diagnosis.summary = std::move(summary);
  job->diagnosis.until = absl::InfinitePast();  // a failure waiting for it goes on
  Wake();
}

void JobManager::NoteTimeout(ActiveJob& job, const RankFailure& failure) {
  ActiveJob::DiagnosisState& d = job.diagnosis;
  if (!options_.diagnose || job.state != RUNNING || d.stall_diagnosed || job.ranks.size() < 2 ||
      !IsCommTimeout(failure) || failure.rank < 0) {
    return;
  }
  if (d.timeout_due) return;  // the first timeout names the occasion
  d.timeout_due = true;
  d.occasion = {DiagnosisOccasion::kTimedOut, failure.rank, failure.worker_id};
  // Until the scheduler starts it (woken now): the failure does not wait without a diagnosis.
  d.until = Now() + options_.diagnosis_deadline + absl::Milliseconds(250);
  Wake();
}

std::vector<TimedOutRank> JobManager::TimedOutRanks(const std::string& job_id) {
  JobsLock lock(this);
  std::vector<TimedOutRank> timed_out;
  const ActiveJob* job = FindActive(job_id);
  if (job == nullptr) return timed_out;
  for (const RankFailure& f : job->failures.heard) {
    if (!IsCommTimeout(f) || f.rank < 0) continue;
    TimedOutRank& t = timed_out.emplace_back();
    t.rank = f.rank;
    t.error = f.error;
    // The peer it waited for first: its error names it before the others it blames (peers
    // that gave up meanwhile and told it so), as "from rank 3 (worker w4 at ...".
    std::vector<std::pair<size_t, int>> named;
    for (const std::string& w : f.suspects) {
      if (auto it = job->rank_of.find(w); it != job->rank_of.end()) {
        named.push_back({f.error.find(absl::StrCat("worker ", w, " at ")), it->second});
      }
    }
    std::stable_sort(named.begin(), named.end());
    for (const auto& [at, rank] : named) t.on.push_back(rank);
  }
  return timed_out;
}

}  // namespace dtrain::coordinator
