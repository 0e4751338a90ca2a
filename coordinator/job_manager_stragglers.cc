// JobManager's straggler handling (JobSpec.stragglers): the timings heartbeats carry, the scores
// of coordinator/policy/stragglers.h each scheduler pass, and the spec's policy for a flagged rank.
// Apart from job_manager.cc so the job life cycle there stays readable; the same class.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/job_manager.h"
#include "coordinator/recovery.h"
#include "plan/spec_enums.h"

namespace dtrain::coordinator {
namespace {

// Timings kept per job between two passes (a pass every 200 ms at most: a few per rank).
constexpr size_t kMaxQueuedTimings = 1 << 14;

}  // namespace

void JobManager::QueueTimings(const HeartbeatRequest& request) {
  absl::MutexLock lock(&timings_mu_);
  std::vector<std::pair<std::string, RankTiming>>& queued = timings_[request.running_job_id()];
  for (const RankTiming& t : request.timings()) queued.emplace_back(request.worker_id(), t);
  if (queued.size() > kMaxQueuedTimings) {  // no pass for a long while: keep the newest
    queued.erase(queued.begin(), queued.end() - kMaxQueuedTimings);
  }
}

void JobManager::ScoreStragglers() {
  absl::flat_hash_map<std::string, std::vector<std::pair<std::string, RankTiming>>> queued;
  {
    absl::MutexLock lock(&timings_mu_);
    queued.swap(timings_);
  }
  for (auto& [n, job] : jobs_) {
    const bool scored = job.state == RUNNING && job.ranks.size() > 1 &&
                        job.spec.stragglers().threshold() > 1;  // (specs from before: none)
    if (!scored) {
      if (job.stragglers.scorer != nullptr && options_.metrics != nullptr) {
        options_.metrics->ClearStragglerScores(job.id);
      }
      job.stragglers = ActiveJob::StragglerState();
      continue;
    }
    if (job.stragglers.scored_run != job.assignment.get()) {  // a new run: its own window
      job.stragglers.scorer =
          std::make_unique<StragglerScorer>(job.spec.stragglers(), job.assignment->placement());
      job.stragglers.scored_run = job.assignment.get();
      job.stragglers.scores.clear();
    }
    auto it = queued.find(job.id);
    if (it == queued.end()) continue;
    for (const auto& [worker, timing] : it->second) {
      auto rank = job.rank_of.find(worker);
      if (rank != job.rank_of.end()) job.stragglers.scorer->Add(rank->second, timing);
    }
    std::optional<StragglerScorer::Result> result = job.stragglers.scorer->Score();
    if (!result.has_value()) continue;
    job.stragglers.scores = std::move(result->scores);
    if (options_.metrics != nullptr) {
      options_.metrics->SetStragglerScores(job.id, job.stragglers.scores);
    }
    const int window = job.stragglers.scorer->window_steps();
    for (int rank : result->recovered) {
      Event(job.id, StragglerCleared(job.stragglers.scores[rank], window));
    }
    // The slowest flagged rank first; one action per window: a replace starts a new run.
    std::sort(result->flagged.begin(), result->flagged.end(), [&](int a, int b) {
      return job.stragglers.scores[a].score() > job.stragglers.scores[b].score();
    });
    for (int rank : result->flagged) {
      const StragglerScore score = job.stragglers.scores[rank];
      Event(job.id, StragglerFlagged(score, window));
      // (Not after a restart this window already proposed: the run is about to stop.)
      if (job.state == RUNNING && job.stragglers.scored_run == job.assignment.get() &&
          !job.planned.restart.has_value()) {
        ActOnStraggler(job, score);
      }
    }
  }
}

void JobManager::ActOnStraggler(ActiveJob& job, const StragglerScore& score) {
  const StragglerPolicy policy = plan::PlannedStragglerPolicy(job.spec);
  if (policy == STRAGGLERS_REBALANCE) {  // re-cut from the window's per-stage compute (rebalance.h)
    const absl::StatusOr<RebalanceDecision> d =
        RebalanceLocked(job, {}, absl::StrCat("straggler policy, ", score.worker_id(), " flagged"));
    if (!d.ok()) {
      Event(job.id,
            absl::StrCat("straggler policy rebalance: ", d.status().message(), "; reporting only"));
    }
    return;
  }
  if (policy != STRAGGLERS_REPLACE) return;  // "report": the event is all
  // An idle spare that fits: not a worker of this job, not one that failed it twice or that it
  // replaced as a straggler before.
  const absl::flat_hash_set<std::string> excluded = NotSparesForReplace(job.recoveries);
  std::string spare;
  for (const WorkerInfo& w : registry_.IdleWorkers()) {
    if (DeviceFits(job.spec.device(), w.device().kind()) && !excluded.contains(w.worker_id()) &&
        !job.rank_of.contains(w.worker_id())) {
      spare = w.worker_id();
      break;
    }
  }
  if (spare.empty()) {
    Event(job.id, absl::StrCat("straggler policy replace: no idle spare to replace ",
                               score.worker_id(), " with; reporting only"));
    return;
  }
  Recovery replace;
  replace.set_replaced_worker(score.worker_id());
  replace.set_cause(absl::StrFormat(
      "replacing straggler %s (rank %d, %s): %.1fx the median of its peers over the last %d "
      "steps; an idle spare (%s) is there; not a failure",
      score.worker_id(), score.rank(), score.label(), score.score(),
      job.stragglers.scorer->window_steps(), spare));
  const std::string why = replace.cause();
  Event(job.id, absl::StrFormat("straggler policy replace: swapping %s (rank %d, %s) for the "
                                "idle spare %s; the job resumes from its latest sealed "
                                "checkpoint (a planned restart: not counted against "
                                "max_restarts)",
                                score.worker_id(), score.rank(), score.label(), spare));
  // Every rank stops now (the straggler too) and the job resumes from its latest sealed
  // checkpoint without the straggler (AdvanceRecovery excludes it).
  ProposeRestart(job, std::move(replace), why);
}

void JobManager::AddStragglerScores(Job* job) {
  const ActiveJob* active = FindActive(job->id());
  if (active == nullptr) return;
  for (const StragglerScore& s : active->stragglers.scores) *job->add_stragglers() = s;
}

}  // namespace dtrain::coordinator
