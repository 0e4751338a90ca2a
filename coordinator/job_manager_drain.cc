// Maintenance without failure (DrainWorker): a drained worker takes no new job, and the job it
// runs a rank of restarts without it at the job's next sealed checkpoint (or at once), as a
// planned restart (Recovery.maintenance) that max_restarts does not count.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"

namespace dtrain::coordinator {

absl::StatusOr<DrainWorkerResponse> JobManager::DrainLocked(const DrainWorkerRequest& request) {
  const std::string& worker_id = request.worker_id();
  if (worker_id.empty()) return absl::InvalidArgumentError("worker_id is empty");
  ASSIGN_OR_RETURN(const std::string held, registry_.SetDraining(worker_id, request.drain()));
  Log(absl::StrCat("worker ", worker_id, request.drain() ? " drained" : " undrained",
                   held.empty() ? "" : absl::StrCat(" (it runs ", held, ")")));
  Wake();  // undrained: it may take a queued job
  DrainWorkerResponse response;
  ActiveJob* job = held.empty() || !request.drain() ? nullptr : FindActive(held);
  if (job != nullptr && job->rank_of.contains(worker_id) && job->state != RECOVERING) {
    response.set_job_id(job->id);
    const bool at_seal = !request.now() && job->state == RUNNING &&
                         job->spec.checkpoint().interval_steps() > 0 &&
                         job->last_step < job->spec.steps();
    if (at_seal) {
      job->planned.drain_at_seal = worker_id;
      Event(job->id, absl::StrCat("worker ", worker_id,
                                  " drained: the job moves off it at its next sealed checkpoint"));
    } else {
      MoveOffDrained(*job, worker_id);
      Reconcile(job->id).IgnoreError();  // logged; the pass decides again
      response.set_moved_now(true);
    }
  }
  ASSIGN_OR_RETURN(*response.mutable_worker(), registry_.Get(worker_id));
  return response;
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

}  // namespace dtrain::coordinator
