// Maintenance without failure (DrainWorker): a drained worker takes no new job, and the job it
// runs a rank of restarts without it at the job's next sealed checkpoint (or at once), as a
// planned restart (Recovery.maintenance) that max_restarts does not count. And a checkpoint
// asked for now (CheckpointJob), before maintenance or to sample the model as it is.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"

namespace dtrain::coordinator {

absl::StatusOr<DrainWorkerResponse> JobManager::DrainLocked(const DrainWorkerRequest& request) {
  const std::string& worker_id = request.worker_id();
  if (worker_id.empty()) return absl::InvalidArgumentError("worker_id is empty");
  // Saved first (a drain outlives a coordinator restart), then applied. The session cannot
  // change in between: registrations take the jobs' lock too.
  ASSIGN_OR_RETURN(const std::string session, registry_.DrainableSession(worker_id));
  RETURN_IF_ERROR(store_->SetDrained(worker_id, session, request.drain(), NowMs()));
  ASSIGN_OR_RETURN(const std::string held, registry_.SetDraining(worker_id, request.drain()));
  Log(absl::StrCat("worker ", worker_id, request.drain() ? " drained" : " undrained",
                   held.empty() ? "" : absl::StrCat(" (it runs ", held, ")")));
  Wake();  // undrained: it may take a queued job
  DrainWorkerResponse response;
  ActiveJob* job = held.empty() || !request.drain() ? nullptr : FindActive(held);
  if (job != nullptr && job->rank_of.contains(worker_id) && job->state != RECOVERING) {
    response.set_job_id(job->id);
    response.set_moved_now(PlanMoveOffDrained(*job, worker_id, request.now()));
  }
  ASSIGN_OR_RETURN(*response.mutable_worker(), registry_.Get(worker_id));
  return response;
}

bool JobManager::PlanMoveOffDrained(ActiveJob& job, const std::string& worker_id, bool now) {
  if (!job.rank_of.contains(worker_id) || job.state == RECOVERING) return false;
  if (!now && job.MovesAtNextSeal()) {
    job.planned.drain_at_seal = worker_id;
    Event(job.id, absl::StrCat("worker ", worker_id,
                               " drained: the job moves off it at its next sealed checkpoint"));
    return false;
  }
  const std::string id = job.id;
  MoveOffDrained(job, worker_id);
  Reconcile(id).IgnoreError();  // logged; the pass decides again
  return true;
}

void JobManager::MoveOffDrained(ActiveJob& job, const std::string& worker_id) {
  Recovery move;
  move.set_maintenance(true);
  move.set_cause(absl::StrCat("worker ", worker_id, " drained (dtrain workers drain)"));
  const std::string why = absl::StrCat(
      "maintenance (not counted against max_restarts): ", move.cause(), "; moving off it");
  // Every rank stops and the job resumes from its latest sealed checkpoint on workers that are
  // not drained (IdleWorkers leaves drained ones out).
  ProposeRestart(job, std::move(move), why);
}

void JobManager::MaybeMoveOffDrained(ActiveJob& job) {
  if (job.planned.drain_at_seal.empty() || job.state != RUNNING ||
      job.planned.restart.has_value()) {
    return;
  }
  const std::string worker_id = std::exchange(job.planned.drain_at_seal, "");
  if (!job.rank_of.contains(worker_id)) return;
  MoveOffDrained(job, worker_id);
}

absl::StatusOr<Job> JobManager::CheckpointJob(const std::string& job_id, const std::string& by) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  {
    JobsLock lock(this);
    ActiveJob* job = FindActive(job_id);
    if (job == nullptr || job->state != RUNNING) {
      ASSIGN_OR_RETURN(const Job stored, store_->GetJob(job_id, /*with_history=*/false));
      return absl::FailedPreconditionError(
          absl::StrCat(job_id, " is ", JobState_Name(stored.state()),
                       ": only a running job is asked for a checkpoint"));
    }
    if (!job->planned.checkpoint_after.has_value()) {
      job->planned.checkpoint_after = job->sealed_step;
      Event(job_id, absl::StrCat("checkpoint asked for", by.empty() ? "" : absl::StrCat(" by ", by),
                                 ": its ranks take it at their next step (last sealed: ",
                                 job->sealed_step == 0 ? std::string("none")
                                                       : absl::StrCat("step ", job->sealed_step),
                                 ")"));
    }
    PublishCheckpointsWanted();  // heard at the workers' next heartbeats
  }
  return GetJob(job_id);
}

}  // namespace dtrain::coordinator
