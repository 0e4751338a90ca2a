// JobManager across restarts and pauses: the active jobs loaded from the store, the workers
// that register again (re-attached, sent their assignment again, or failing the job they came
// back without), and a pause of the coordinator's own process.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_paths.h"
#include "common/run_record.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/rank_assignment.h"
#include "coordinator/recovery.h"

namespace dtrain::coordinator {

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<Job> jobs,
                   store_->JobsInStates({QUEUED, PLACING, RUNNING, RECOVERING}));
  JobsLock lock(this);
  const absl::Time now = Now();
  int queued = 0, resumed = 0;
  for (const Job& stored : jobs) {
    ActiveJob job = Restored(stored, now);
    (job.state == QUEUED ? queued : resumed)++;
    jobs_.emplace(JobNumber(job.id), std::move(job));
  }
  ASSIGN_OR_RETURN(auto drained, store_->DrainedWorkers());  // worker id -> session drained
  std::vector<std::string> names;
  for (const auto& [worker_id, session] : drained) names.push_back(worker_id);
  std::sort(names.begin(), names.end());
  Log(absl::StrCat("store ", store_->path(), ": ", queued, " queued and ", resumed,
                   " placed or running jobs to resume"));
  if (!names.empty()) {
    Log(absl::StrCat(Plural(names.size(), "worker"), " drained before this restart (",
                     absl::StrJoin(names, ", "),
                     "): each is drained again when the same session registers"));
  }
  registry_.RestoreDrains(std::move(drained));
  // The report numbers recorded before the restart: a worker sends again what it was not
  // answered, and a line recorded then is not recorded twice.
  ASSIGN_OR_RETURN(std::vector<ReportMark> marks, store_->ReportMarks());
  for (const ReportMark& mark : marks) {
    registry_.NoteReportRecorded(mark.worker_id, mark.session_id, mark.seq);
  }
  return absl::OkStatus();
}

ActiveJob JobManager::Restored(const Job& stored, absl::Time now) {
  ActiveJob job;
  job.diagnosis.progress_at = now;  // a stall is counted from the restart
  job.id = stored.id();
  job.spec = stored.spec();
  job.submitted = absl::FromUnixMillis(stored.submitted_unix_ms());
  job.state = stored.state();
  job.reason = stored.reason();
  job.last_step = stored.latest().step();
  job.sealed_step = stored.checkpoint().last_sealed_step();
  job.uid = stored.uid();
  job.owner = stored.owner();
  job.recoveries.assign(stored.recoveries().begin(), stored.recoveries().end());
  job.run_spec = CurrentRunSpec(job.spec, job.recoveries);
  job.recovery.phase_start = now;  // an open recovery's phase times restart here
  if (job.state == QUEUED) return job;
  if (job.state == RECOVERING) {
    // Its old ranks were told to stop before the restart (those still running it are told
    // again when they re-register); it is placed when enough workers are idle.
    job.recovery.phase = RecoveryPhase::kPlace;
    Event(job.id, "coordinator restarted; the recovery goes on");
    return job;
  }
  auto assignment = std::make_shared<JobAssignment>();
  assignment->set_job_id(job.id);
  assignment->set_job_uid(job.uid);
  assignment->set_attempt(static_cast<int>(job.recoveries.size()));
  *assignment->mutable_spec() = job.run_spec;
  *assignment->mutable_placement() = stored.placement();
  // Each rank's part of the plan is cut from it when (re)sent (rank_assignment.h).
  absl::Status planned = AttachJobPlan(assignment.get());
  if (!planned.ok()) Log(absl::StrCat(job.id, ": cannot plan its spec: ", planned.message()));
  job.SetRanks(std::move(assignment));
  if (job.OpenRecovery() != nullptr) job.recovery.phase = RecoveryPhase::kLoad;
  std::vector<std::string> workers;
  for (const ActiveJob::Rank& r : job.ranks) workers.push_back(r.worker_id);
  job.restart.awaiting.insert(workers.begin(), workers.end());
  job.restart.deadline = now + options_.lease;
  if (job.ranks.empty()) {
    job.pending_end = {FAILED, "coordinator restarted and found no placement for the job"};
  }
  Event(job.id, absl::StrCat("coordinator restarted; waiting up to ", Seconds(options_.lease),
                             " for ", WorkerList(workers), " to re-register"));
  return job;
}

void JobManager::NotePause(absl::Duration paused) {
  const std::string text =
      absl::StrCat("the coordinator's own process did not run for ", Seconds(paused),
                   " (a VM stall, swap, SIGSTOP?); every worker has ", Seconds(options_.lease),
                   " (the lease) to report again before any is declared lost");
  Log(text);
  const absl::Time now = Now();
  for (auto& [n, job] : jobs_) {
    Event(job.id, text);
    if (!job.restart.awaiting.empty()) {
      job.restart.deadline = std::max(job.restart.deadline, now + options_.lease);
    }
  }
}

JobManager::Returning JobManager::MatchReturning(const RegisterWorkerRequest& request) {
  const std::string& worker_id = request.worker_id();
  Returning match;
  if (!request.running_job_id().empty()) {
    ActiveJob* job = FindActive(request.running_job_id());
    if (job != nullptr && job->state != QUEUED && job->state != RECOVERING &&
        job->rank_of.contains(worker_id)) {
      match.attach = job->id;
    } else if (job == nullptr && absl::IsNotFound(store_
                                                      ->GetJob(request.running_job_id(),
                                                               /*with_history=*/false)
                                                      .status())) {
      // A coordinator started on another database than the job's (a volume not mounted?).
      Log(absl::StrCat("worker ", worker_id, " registers running ", request.running_job_id(),
                       ", which this coordinator's database has never had (was --db changed? "
                       "the database that has it recovers it from its checkpoints); it will be "
                       "told to stop"));
    } else {
      Log(absl::StrCat("worker ", worker_id, " registers running ", request.running_job_id(),
                       ", which is not its job; it will be told to stop"));
      if (job != nullptr) NoteOldRunStep(*job, request.running_step());
    }
    return match;
  }
  for (auto& [n, job] : jobs_) {
    if (!job.restart.awaiting.contains(worker_id)) continue;
    auto rank = job.rank_of.find(worker_id);
    if (job.state == PLACING && rank != job.rank_of.end()) {
      match.resend = Delivery{job.assignment, rank->second};
      match.resend_job = job.id;
    } else {
      match.abandoned_job = job.id;
    }
    break;
  }
  return match;
}

void JobManager::RecordReturning(const std::string& worker_id, const RegisterWorkerRequest& request,
                                 const Returning& match) {
  auto returned = [&](ActiveJob& job, const std::string& what) {
    if (job.restart.awaiting.erase(worker_id) == 0) return;
    Event(job.id, absl::StrCat("worker ", worker_id, " ", what, " after the coordinator restart"));
    if (job.restart.awaiting.empty()) job.restart.deadline = absl::InfiniteFuture();
  };
  if (ActiveJob* job = match.attach.empty() ? nullptr : FindActive(match.attach)) {
    returned(*job, absl::StrCat("re-attached at step ", request.running_step()));
    MarkAcked(*job, worker_id);
  }
  if (ActiveJob* job = match.resend_job.empty() ? nullptr : FindActive(match.resend_job)) {
    returned(*job, "came back without the job; assignment sent again");
  }
  if (ActiveJob* job = match.abandoned_job.empty() ? nullptr : FindActive(match.abandoned_job)) {
    job->restart.abandoned_by = worker_id;
    Reconcile(job->id).IgnoreError();  // logged; the pass decides again
  }
}

void JobManager::RestoreDrain(const std::string& worker_id,
                              const WorkerRegistry::RegisterResult& result,
                              const std::string& running) {
  if (result.drain_ended) {
    // A new process: back from maintenance.
    const absl::Status forgotten = store_->SetDrained(worker_id, "", false, NowMs());
    if (!forgotten.ok()) Log(absl::StrCat("worker ", worker_id, ": ", forgotten.ToString()));
  }
  if (!result.drain_restored) return;
  Log(absl::StrCat("worker ", worker_id,
                   " is still drained (its session was drained before this coordinator started)"));
  ActiveJob* job = running.empty() ? nullptr : FindActive(running);
  if (job != nullptr) PlanMoveOffDrained(*job, worker_id, /*now=*/false);
}

absl::StatusOr<RegisterWorkerResponse> JobManager::RegisterWorker(
    const RegisterWorkerRequest& request) {
  const std::string& worker_id = request.worker_id();
  JobsLock lock(this);
  const absl::Time now = Now();
  // No sweep here (O(workers): a registration storm of 50,000 workers would be quadratic): an
  // expired old session that still holds a job is reported by Register (`replaced`) and fails
  // that job below, before the id is reused.
  const Returning match = MatchReturning(request);
  ASSIGN_OR_RETURN(
      WorkerRegistry::RegisterResult result,
      registry_.Register(request, now, match.attach, match.resend ? &*match.resend : nullptr));
  if (result.replaced.has_value()) HandleFault(*result.replaced);
  if (result.new_session) samples_.EndSent(worker_id);
  RestoreDrain(worker_id, result, match.attach);
  Log(absl::StrCat("worker ", worker_id, result.new_session ? " registered" : " re-registered",
                   " (session ", request.session_id(), ", ", request.address(), ", host \"",
                   request.host_label(), "\", ", request.device().kind(), " ",
                   request.device().name(), ")",
                   match.attach.empty() ? "" : " running " + match.attach));
  if (!request.previous_run().job_id().empty()) {
    // Its previous process died running that job (common/run_record.h): say how, in the job's
    // log (the job may have moved on or ended since).
    const std::string line = DescribePreviousRun(worker_id, request.previous_run());
    Log(line);
    if (IsJobId(request.previous_run().job_id()) &&
        store_->GetJob(request.previous_run().job_id(), /*with_history=*/false).ok()) {
      Event(request.previous_run().job_id(), line);
    }
  }
  RecordReturning(worker_id, request, match);
  Wake();
  RegisterWorkerResponse response;
  const HeartbeatPace pace = registry_.pace();
  response.set_lease_ms(absl::ToInt64Milliseconds(pace.lease));
  response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(pace.interval));
  return response;
}

}  // namespace dtrain::coordinator
