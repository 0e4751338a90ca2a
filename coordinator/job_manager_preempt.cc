// Priorities and preemption. A job's priority may change while it has not ended
// (SetJobPriority). With Options::preempt_after, a queued job that has waited long enough for
// workers takes them from running jobs of a lower priority, each at its next sealed checkpoint. The
// victims are chosen by policy/preemption.h; each yields through a planned restart
// (Recovery.preempted_by) whose place phase waits as a queued job of its priority would
// (job_decision.h), so nothing is lost but time, and no restart is counted.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/policy/preemption.h"
#include "coordinator/recovery.h"
#include "plan/job_plan.h"
#include "plan/ranks.h"

namespace dtrain::coordinator {
namespace {

// Whether every worker a job of `device` may run on could run one of `waiter_device`: its
// workers, once free, are the waiter's.
bool WorkersServe(absl::string_view device, absl::string_view waiter_device) {
  for (absl::string_view kind : {"cpu", "cuda"}) {
    if (DeviceFits(device, kind) && !DeviceFits(waiter_device, kind)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<Job> JobManager::SetJobPriority(const std::string& job_id, int32_t priority,
                                               const std::string& by) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  // The spec's rules (its range among them), checked before the jobs' lock: a plan of a large
  // spec takes a while, and only the priority changes.
  {
    ASSIGN_OR_RETURN(const Job stored, store_->GetJob(job_id, /*with_history=*/false));
    JobSpec spec = stored.spec();
    spec.set_priority(priority);
    RETURN_IF_ERROR(plan::MakeJobPlan(spec).status());
  }
  {
    JobsLock lock(this);
    ActiveJob* job = FindActive(job_id);
    ASSIGN_OR_RETURN(const Job stored, store_->GetJob(job_id, /*with_history=*/false));
    if (job == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(job_id, " already ended ",
                                                        JobState_Name(stored.state()),
                                                        ": a priority orders only jobs not ended"));
    }
    JobSpec spec = stored.spec();
    const int32_t before = spec.priority();
    spec.set_priority(priority);
    if (priority != before) {
      RETURN_IF_ERROR(store_->SetSpec(job_id, spec));
      job->spec.set_priority(priority);
      job->run_spec.set_priority(priority);
      Event(job_id, absl::StrCat("priority ", before, " -> ", priority,
                                 by.empty() ? "" : absl::StrCat(" (set by ", by, ")")));
      to_notify_.push_back(job_id);
      Wake();  // its place in the queue, and whom it may preempt, at the next pass
    }
  }
  return GetJob(job_id);
}

JobManager::Preemption JobManager::PreemptionsOf(const ActiveJob& waiter,
                                                 const std::vector<plan::Candidate>* usable) {
  Preemption in_flight;
  if (options_.preempt_after <= absl::ZeroDuration()) return in_flight;  // none can be
  for (const auto& [n, job] : jobs_) {
    if (job.planned.yield_to == waiter.id && job.state == RUNNING) {
      in_flight.coming += static_cast<int64_t>(job.ranks.size());
      in_flight.holds = true;
      continue;
    }
    const Recovery* open = job.OpenRecovery();
    if (job.state != RECOVERING || open == nullptr || open->preempted_by() != waiter.id) continue;
    // Yielded, not placed again: its workers are the waiter's. Those stopping, and those
    // stopped but not among the usable idle workers of this pass (its list was taken before
    // they stopped), are still coming.
    in_flight.holds = true;
    for (const std::string& w : job.recovery.stopping) {
      const bool usable_now =
          usable != nullptr && job.recovery.phase != RecoveryPhase::kStop &&
          std::any_of(usable->begin(), usable->end(),
                      [&w](const plan::Candidate& c) { return c.worker->worker_id() == w; });
      if (!usable_now && registry_.IsLive(w)) ++in_flight.coming;
    }
  }
  // Only while the live workers could run it: else it holds back nobody.
  in_flight.holds = in_flight.holds && LiveWorkersCouldRun(waiter.spec, registry_.Counts());
  return in_flight;
}

std::vector<PreemptionCandidate> JobManager::PreemptionCandidates(const ActiveJob& waiter) {
  std::vector<PreemptionCandidate> candidates;
  for (auto& [n, job] : jobs_) {
    // Running on workers the waiter can use, able to seal a checkpoint when asked (it resumes
    // where it stopped), not about to restart, and yielding to nobody already.
    if (!job.MovesAtNextSeal() || job.planned.restart.has_value() ||
        !job.planned.yield_to.empty() || !WorkersServe(job.spec.device(), waiter.spec.device())) {
      continue;
    }
    candidates.push_back(PreemptionCandidate{
        job.id, job.spec.priority(), static_cast<int64_t>(job.ranks.size()), job.run_started});
  }
  return candidates;
}

JobManager::Preemption JobManager::MaybePreempt(const ActiveJob& waiter,
                                                const std::vector<plan::Candidate>& usable) {
  if (options_.preempt_after <= absl::ZeroDuration()) return Preemption();
  Preemption preemption = PreemptionsOf(waiter, &usable);
  const int64_t needed = plan::WorkersNeeded(waiter.spec.parallel());
  const std::vector<std::string> victims = ChoosePreemptions(
      waiter.spec.priority(), needed, static_cast<int64_t>(usable.size()) + preemption.coming,
      PreemptionCandidates(waiter));
  if (Now() - waiter.submitted < options_.preempt_after) {
    preemption.later = !victims.empty();
    return preemption;
  }
  for (const std::string& id : victims) {
    ActiveJob* job = FindActive(id);
    job->planned.yield_to = waiter.id;
    const int64_t workers = static_cast<int64_t>(job->ranks.size());
    preemption.coming += workers;
    preemption.holds = true;
    Event(id, absl::StrCat(
                  "preempted by ", waiter.id, " (priority ", waiter.spec.priority(),
                  ", above this job's ", job->spec.priority(), "; queued ",
                  absl::FormatDuration(absl::Trunc(Now() - waiter.submitted, absl::Seconds(1))),
                  " for ", Plural(needed, "worker"), "): it yields its ", Plural(workers, "worker"),
                  " at its next sealed checkpoint and resumes from it later"));
    Event(waiter.id, absl::StrCat("preempting ", id, " (priority ", job->spec.priority(), ", ",
                                  Plural(workers, "worker"), ") at its next sealed checkpoint"));
  }
  return preemption;
}

std::string JobManager::PreemptionNote(const Preemption& preemption) const {
  if (preemption.coming > 0) {
    return absl::StrCat("; ", Plural(preemption.coming, "worker"),
                        " of jobs of a lower priority come free at their next sealed checkpoints "
                        "(preempted)");
  }
  if (preemption.holds) return "; the workers of the jobs it preempted are kept for it";
  if (preemption.later) {
    return absl::StrCat("; it preempts jobs of a lower priority once queued for ",
                        absl::FormatDuration(options_.preempt_after), " (--preempt_after)");
  }
  return "";
}

void JobManager::MaybeYield(ActiveJob& job, int64_t step) {
  if (job.planned.yield_to.empty() || job.state != RUNNING || job.planned.restart.has_value()) {
    return;
  }
  const std::string to = std::exchange(job.planned.yield_to, "");
  const ActiveJob* waiter = FindActive(to);
  if (waiter == nullptr || waiter->state != QUEUED || waiter->pending_end.has_value()) {
    Event(job.id, absl::StrCat("no longer preempted: ", to, " is not queued any more"));
    return;
  }
  if (step >= job.spec.steps()) return;  // its last step: the job ends now anyway
  Recovery yield;
  yield.set_preempted_by(to);
  yield.set_cause(absl::StrCat("preempted by ", to, " (priority ", waiter->spec.priority(),
                               "): yielding its workers at ",
                               step > 0 ? absl::StrCat("the checkpoint of step ", step)
                                        : std::string("the start (no checkpoint sealed)"),
                               "; it resumes from it when workers are free again"));
  const std::string why = yield.cause();
  ProposeRestart(job, std::move(yield), why);
}

int JobManager::QueuedAheadOfPreempted(const ActiveJob& job) {
  int ahead = 0;
  std::optional<WorkerCounts> counts;
  for (const auto& [n, other] : jobs_) {
    if (other.state != QUEUED || other.pending_end.has_value() ||
        other.spec.priority() <= job.spec.priority() ||
        !SameWorkers(other.spec.device(), job.spec.device())) {
      continue;
    }
    // Only a job the live workers could run: one that waits for workers that may never come
    // holds back nobody.
    if (!counts.has_value()) counts = registry_.Counts();
    if (LiveWorkersCouldRun(other.spec, *counts)) ++ahead;
  }
  return ahead;
}

}  // namespace dtrain::coordinator
