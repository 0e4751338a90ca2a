// What should happen next to one job: a pure function of its record (what the RPC handlers and
// the sweep observed), a view of the cluster and the time, in the manner of a Kubernetes
// controller's Reconcile. The JobManager builds the record and the view, asks Decide, and
// applies the answer in one place (JobManager::Apply: check the transition against
// job_transitions.h, save, then change memory and tell the workers), again until the answer is
// to wait. Fed the same observations after a restart or a pause, it makes the same decision.
//
//   state       observation                                       action           -> state
//   any         a final state the store refused                   kRetryEnd        that state
//   any         CancelJob                                         kCancel          CANCELLED
//   QUEUED      enough usable idle workers                        kPlace           PLACING
//   PLACING     every rank acknowledged                           kMarkRunning     RUNNING
//   PLACING,    every rank succeeded                              kEndSucceeded    SUCCEEDED
//    RUNNING    failures, the root cause known or its window over kDecideFailure
//    (DecideAfterFailure)
//               after a restart, a worker not back within a lease kWorkersNotReturned (same)
//               a policy planned a restart (grow, rebalance,      kBeginRecovery   RECOVERING
//                drain, straggler replaced)
//   RECOVERING  stop phase: the old ranks stopped, or a lease     kEndStopPhase    RECOVERING
//               place phase: enough usable idle workers           kPlace           PLACING
//               place phase: "shrink", settled, fewer suffice     kPlaceShrunk     PLACING
//               place phase: none within fault_tolerance.wait_for kFailRecovery    FAILED
//               (a preempted job: enough usable idle workers and  kPlace           PLACING
//                no queued job of a higher priority ahead; it waits as long as it takes)
//   otherwise                                                     kWait            (unchanged)
//
// DecideAfterFailure then says what a failure means: a restart to export the weights (the last
// step sealed), a maintenance restart (a worker stopped on purpose), a restart counted against
// max_restarts, or FAILED.
#ifndef DTRAIN_COORDINATOR_JOB_DECISION_H_
#define DTRAIN_COORDINATOR_JOB_DECISION_H_

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"

namespace dtrain::coordinator {

// The phases of a recovery (recovery.h), in order; kNone when no recovery is open. Each one's
// time is kept in the job's Recovery (stop_ms, place_ms, load_ms, first_step_ms).
enum class RecoveryPhase {
  kNone,
  kStop,       // RECOVERING: the previous run's ranks are told to stop; wait until they did
  kPlace,      // RECOVERING: waiting for idle workers to place the new run on
  kLoad,       // PLACING/RUNNING: the new run loads the latest sealed checkpoint
  kFirstStep,  // RUNNING: loaded; the recovery is done at the first new step
};
absl::string_view RecoveryPhaseName(RecoveryPhase phase);

// What the handlers observed of one job, as values (JobManager::RecordOf builds it).
struct JobRecord {
  JobState state = QUEUED;
  int ranks = 0;      // ranks of the current run (0 before it is placed and while recovering)
  int acked = 0;      // ranks whose worker reported the job
  int succeeded = 0;  // ranks that reported a successful outcome
  bool cancel_requested = false;                          // CancelJob
  bool pending_end = false;                               // a final state the store refused
  JobState pending_end_state = FAILED;                    // that state
  int failures = 0;                                       // ranks' failures heard in this run
  int failed_workers = 0;                                 // distinct workers among them
  bool conclusive_failure = false;                        // one is not a failure because of a peer
  absl::Time decide_failure_at = absl::InfiniteFuture();  // the root cause's window ends
  bool awaits_diagnosis = false;  // a timeout's diagnosis is still running (the window waits)
  int awaiting = 0;               // after a coordinator restart: workers not back yet
  absl::Time recover_deadline = absl::InfiniteFuture();  // until when they may come back
  bool abandoned = false;        // one came back without the job (after a restart)
  bool planned_restart = false;  // a policy proposed a restart (grow, rebalance, drain, replace)
  RecoveryPhase phase = RecoveryPhase::kNone;
  absl::Time phase_start = absl::InfinitePast();
  bool shrink = false;                          // fault_tolerance.on_worker_loss is "shrink"
  absl::Duration wait_for = absl::Seconds(60);  // fault_tolerance.wait_for
  // The open recovery is a preemption (Recovery.preempted_by): it waits for workers as a queued
  // job does, for as long as it takes (not wait_for), and never shrinks.
  bool preempted = false;
};

// The cluster as the job's next step needs it (computed only where the step needs it). Only
// the scheduler's pass knows it: without it (an RPC handler's decision) nothing is placed and no
// recovery phase ends.
struct ClusterView {
  bool known = false;
  int old_ranks_running = 0;        // stop phase: the previous run's workers still running it
  int usable_idle = 0;              // idle workers that fit the job (device kind, none excluded)
  int needed = 0;                   // workers the run's layout needs
  int shrunk_needed = 0;            // workers the largest smaller layout needs; 0: none
  bool placement_deferred = false;  // a placement was just tried and deferred: wait
  // A preempted job's place phase: queued jobs of a higher priority that the live workers could
  // run. It waits behind them, as it would in the queue.
  int queued_ahead = 0;
};

struct DecisionLimits {
  absl::Duration lease = absl::Seconds(10);
  absl::Duration shrink_settle = absl::Seconds(2);  // JobManager::Options::shrink_settle
};

enum class Action {
  kWait,
  kRetryEnd,
  kCancel,
  kPlace,
  kPlaceShrunk,
  kMarkRunning,
  kEndSucceeded,
  kDecideFailure,
  kWorkersNotReturned,
  kBeginRecovery,
  kEndStopPhase,
  kFailRecovery,
  kEndFailed,
};
absl::string_view ActionName(Action action);

// Why a recovery begins (DecideAfterFailure, or a policy's planned restart).
enum class RestartKind { kNone, kFailure, kFinishing, kMaintenance, kPlanned };

struct Decision {
  Action action = Action::kWait;
  // The state the action moves the job to; the current one when it moves none. For
  // kDecideFailure and kWorkersNotReturned DecideAfterFailure says (the current state here).
  JobState to = QUEUED;
  RestartKind restart = RestartKind::kNone;  // kBeginRecovery
  // kWait in the place phases: the wait is the "shrink" settling time (for its reason's words).
  bool settling = false;
};

Decision Decide(const JobRecord& job, const ClusterView& cluster, absl::Time now,
                const DecisionLimits& limits);

// What a failure of a PLACING or RUNNING job means (the root cause named: FindRootCause).
struct FailureFacts {
  JobState state = RUNNING;
  bool curable = false;            // failure_report.h RestartCanCure
  bool stopped = false;            // the root cause's worker was stopped on purpose (SIGTERM)
  bool final_step_sealed = false;  // the last step is sealed and no run finished the job yet
  int failures_used = 0;           // recovery.h FailureCount
  int max_restarts = 0;            // fault_tolerance.max_restarts
};
Decision DecideAfterFailure(const FailureFacts& facts);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_DECISION_H_
