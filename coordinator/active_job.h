// ActiveJob: what the JobManager holds in memory of one job that has not ended, grouped by
// concern. The RPC handlers record what they observe here; RecordOf reads it into the value
// job_decision.h decides from; JobManager::Apply changes it only after the store saved the
// decision.
#ifndef DTRAIN_COORDINATOR_ACTIVE_JOB_H_
#define DTRAIN_COORDINATOR_ACTIVE_JOB_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "coordinator/job_decision.h"
#include "coordinator/policy/failure_report.h"
#include "coordinator/policy/stragglers.h"
#include "plan/job_plan.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

// Why a run's diagnosis was taken: a stall (no step for diagnose_stall_after), or a rank's
// communication timeout. A type, so no code branches on the words; Describe words it.
struct DiagnosisOccasion {
  enum Kind { kNone, kStalled, kTimedOut };
  Kind kind = kNone;
  int rank = -1;  // kTimedOut: the rank that timed out, and its worker
  std::string worker_id;
  // "it stalled", "rank 0 (w1) timed out" (FAILED and RECOVERING reasons).
  std::string Describe() const;
};

struct ActiveJob {
  struct Rank {
    std::string worker_id;
    bool acked = false;
    bool succeeded = false;
  };
  // After a coordinator restart: the run's workers not back yet, until when they may come, and
  // one that came back without the job.
  struct RestartWait {
    absl::flat_hash_set<std::string> awaiting;
    absl::Time deadline = absl::InfiniteFuture();
    std::string abandoned_by;
  };
  // Failures heard in the current run (failure_report.h) and when to stop waiting for the root
  // cause (Options::failure_window after the first).
  struct Failures {
    std::vector<RankFailure> heard;
    absl::Time decide_at = absl::InfiniteFuture();
  };
  // The open recovery's phase (recovery.h), the previous run's workers still to stop, and when
  // the phase began.
  struct RecoveryState {
    RecoveryPhase phase = RecoveryPhase::kNone;
    std::vector<std::string> stopping;
    // The stopped run's ranks (worker id -> rank) and its reporting rank, until the new run's
    // first step: the steps it trained before its stop reached it are recorded meanwhile
    // (JobManager::RecordStoppedRunSteps).
    absl::flat_hash_map<std::string, int> stopped_rank_of;
    int stopped_reporting_rank = -1;
    absl::Time phase_start = absl::InfinitePast();
    // The submitted layout did not fit the idle workers (their memory): this recovery resumes
    // on the layout the job ran on instead of waiting for it.
    bool submitted_layout_refused = false;
  };
  // Since when the run has made no step (RUNNING entered, or the last step), whether that stall
  // was diagnosed, and the diagnosis (Options::diagnose_stall_after). The one diagnosis of a run
  // may instead come from a rank's timeout (NoteTimeout): `timeout_due` until it starts,
  // `until` the longest the failure waits for it; `occasion` words the reason.
  struct DiagnosisState {
    absl::Time progress_at = absl::InfinitePast();
    bool stall_diagnosed = false;
    std::string summary;
    bool timeout_due = false;
    absl::Time until = absl::InfinitePast();
    DiagnosisOccasion occasion;
    // Whether a failure decision waits for a timeout's diagnosis at `now`.
    bool Awaits(absl::Time now) const { return (stall_diagnosed || timeout_due) && now < until; }
  };
  // RUNNING multi-rank runs (job_manager_stragglers.cc): the scorer of the run `scored_run` (the
  // assignment it was made for: a new run starts a new window) and its latest scores.
  struct StragglerState {
    std::unique_ptr<StragglerScorer> scorer;
    const JobAssignment* scored_run = nullptr;
    std::vector<StragglerScore> scores;
  };
  // What the policies planned: a rebalance's cut (begun at the next sealed checkpoint), a
  // drained worker to move off and a preemption to yield to at the next sealed checkpoint, and
  // a restart proposed now (a grow back, a rebalance, a drain, a straggler replaced, a
  // preemption), which the decision begins.
  struct PlannedRestart {
    Recovery recovery;
    std::string why;
  };
  struct Planned {
    std::optional<std::vector<int>> pending_cut;
    std::string pending_cut_summary;
    std::string drain_at_seal;
    // A queued job of a higher priority this one yields its workers to at its next sealed
    // checkpoint (JobManager::Options::preempt_after).
    std::string yield_to;
    // CheckpointJob: a checkpoint of a step after this one (the last sealed when asked).
    std::optional<int64_t> checkpoint_after;
    std::optional<PlannedRestart> restart;
  };

  std::string id;
  std::string uid;    // Job.uid
  std::string owner;  // Job.owner: whose share of the workers its place in the queue counts
  int32_t announced_position = 0;  // QUEUED: the position its watchers were last woken for
  JobSpec spec;
  absl::Time submitted;
  absl::Time run_started = absl::InfinitePast();  // the current run entered RUNNING
  JobState state = QUEUED;
  std::string reason;
  std::shared_ptr<const JobAssignment> assignment;  // from PLACING on: id, spec, placement
  // The plan of the spec Place last planned for this job, and that spec (encoded): a job's
  // plan is computed once per spec it is placed with, not at every pass that tries to place
  // it (a job waiting for memory is tried at every pass).
  std::shared_ptr<const JobPlan> plan;
  std::string plan_spec;
  std::vector<Rank> ranks;                        // placement order (dp, pp, tp)
  absl::flat_hash_map<std::string, int> rank_of;  // worker id -> index in ranks
  int acked = 0;                                  // ranks acked, and succeeded
  int succeeded = 0;
  int reporting_rank = 0;  // dp=0, tp=0, last pipeline stage
  int64_t last_step = 0;
  int64_t sealed_step = 0;  // its newest sealed checkpoint's step (0: none)
  std::string output;
  // The reporting rank's JobOutcome.end_reason (early stopping), once it succeeded.
  EndReason end_reason = END_REASON_UNSPECIFIED;
  // CancelJob's reason, until the cancel is applied.
  std::optional<std::string> cancel;
  // A final state the store refused (disk full...); retried every pass.
  std::optional<std::pair<JobState, std::string>> pending_end;
  // Recoveries (recovery.h), as stored; the last one is in progress while !done().
  std::vector<Recovery> recoveries;
  JobSpec run_spec;          // the current run's spec (CurrentRunSpec): its layout may have shrunk
  bool run_located = false;  // rank 0 of the current run reported its location
  // Rank 0 of the current run: its last step waits for disk space (GetJob's reason says so).
  std::optional<CheckpointWait> space_wait;
  RestartWait restart;
  Failures failures;
  RecoveryState recovery;
  DiagnosisState diagnosis;
  StragglerState stragglers;
  Planned planned;
  // The workers (own and idle, sorted ids joined by ",") a shrunk job could not grow back onto:
  // no grow back is asked for again until they change (JobManager::IdleToGrowBack).
  std::string grow_refused_on;

  // A plan waits for this running job's next sealed checkpoint (a preemption's yield, a drain,
  // a rebalance): its workers are asked for one at once (HeartbeatResponse.checkpoint_requests)
  // rather than left to reach the next multiple of its interval.
  bool WaitsForNextSeal() const;
  // Whether a plan that needs this job's workers (a preemption, a drained worker, a re-cut) can
  // wait for the checkpoint its ranks are asked for, instead of restarting it now from its
  // latest sealed one: it runs and has steps left to train. Every run has a checkpoint
  // directory (CheckpointSpec.dir, or the worker's data root for one worker), so a job whose
  // interval_steps is 0 seals when asked too. The one rule every such plan calls.
  bool MovesAtNextSeal() const;
  // A checkpoint step sealed or skipped: it answers a CheckpointJob ask for a step before it.
  void AnswerCheckpointAsk(int64_t step);
  // The recovery in progress, or nullptr.
  Recovery* OpenRecovery();
  const Recovery* OpenRecovery() const;
  // The run's ranks from `assignment` (none acked or succeeded yet).
  void SetRanks(std::shared_ptr<const JobAssignment> assignment);
  void MarkAcked(int rank);
  void MarkSucceeded(int rank);
};

// What job_decision.h decides from: the job's record at `now` (fault_tolerance from its spec).
JobRecord RecordOf(const ActiveJob& job, absl::Time now);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_ACTIVE_JOB_H_
