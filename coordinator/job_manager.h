// JobManager: the coordinator's logic behind its RPCs, independent of gRPC. It owns the job
// store, the worker registry and the watchers' notifier, and runs the scheduler.
//
// Job life cycle (every transition is committed to the store with a reason before it is acted
// on, and wakes the job's watchers):
//   QUEUED   -> PLACING    enough live idle workers: PlaceJob, assignments queued for heartbeats
//            (while waiting the reason says so: "waiting for 4 idle workers; 1 idle, 2 busy,
//            0 lost")
//   PLACING  -> RUNNING    every assigned worker reported the job (heartbeat running_job_id or a
//                          progress report)
//   RUNNING  -> SUCCEEDED  every rank reported a successful outcome
//   any      -> FAILED     a rank's error outcome, a worker stopped (DeregisterWorker) or lost
//                          ("worker w3 lost: no heartbeat for 5.0s"), an assignment not
//                          accepted or a job dropped within a lease, or a coordinator restart
//                          the job's workers did not come back from within a lease. A rank that
//                          failed because of a peer waits up to Options::failure_window for the
//                          root cause to report; the reason names it first (failure_report.h).
//   any      -> CANCELLED  CancelJob
//   RUNNING, PLACING -> RECOVERING  instead of FAILED when a restart can cure the failure
//                          (failure_report.h RestartCanCure) and the spec's
//                          fault_tolerance.max_restarts are not used up; recovery.h has the
//                          phases. RECOVERING -> PLACING on the new placement, or -> FAILED
//                          when "wait" found too few workers within wait_for.
// When a job ends, its other workers are told to stop in their heartbeat responses.
//
// Restart: jobs QUEUED in the store stay queued; RECOVERING ones go on recovering (placed when
// enough workers are idle). PLACING and RUNNING jobs wait one lease for
// their workers to re-register with running_job_id (they are re-attached and the job goes on);
// a PLACING job's worker that comes back without it gets its assignment again.
//
// How (README "How the manager decides"): handlers record observations into the job's
// ActiveJob (active_job.h); Decide (job_decision.h) says what follows from its record, the
// cluster view and the time; Apply (job_manager_apply.cc) is the one place a decision takes
// effect: checked against job_transitions.h, saved, then memory changed and workers told.
//
// Locking: mu_ guards the active jobs and is taken before the registry's and the store's own
// mutexes, never after. Heartbeat takes only the registry's mutex, except on the rare
// heartbeat that acknowledges an assignment.
#ifndef DTRAIN_COORDINATOR_JOB_MANAGER_H_
#define DTRAIN_COORDINATOR_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/active_job.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/dir_removals.h"
#include "coordinator/job_decision.h"
#include "coordinator/job_notifier.h"
#include "coordinator/job_store.h"
#include "coordinator/pause_detector.h"
#include "coordinator/policy/diagnosis.h"
#include "coordinator/policy/failure_report.h"
#include "coordinator/policy/preemption.h"
#include "coordinator/policy/rebalance.h"
#include "coordinator/policy/stragglers.h"
#include "coordinator/sample_asks.h"
#include "coordinator/worker_registry.h"
#include "plan/job_plan.h"
#include "plan/placement.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

class QueueOrder;  // job_manager_internal.h

class JobManager {
 public:
  struct Options {
    absl::Duration lease = absl::Seconds(10);              // --lease
    absl::Duration heartbeat_interval = absl::Seconds(1);  // told to workers
    // --max_heartbeat_rate: beyond this many heartbeats a second from the live workers, the
    // interval and the lease grow with the cluster (heartbeat_pace.h); 0: never.
    double max_heartbeat_rate = 10'000;
    // Longest time between scheduler passes (it also runs when woken by a submit, a register,
    // a freed worker). Zero: lease / 8, clamped to [10ms, 200ms].
    absl::Duration tick = absl::ZeroDuration();
    std::function<absl::Time()> clock;  // default absl::Now
    // Measures this process's own pauses (pause_detector.h): after a gap in its processing
    // longer than a heartbeat interval every worker gets a lease to report before any is
    // declared lost. Default: the steady clock, unless `clock` is set (a fake clock's jumps
    // are not pauses): then none.
    MonotonicClock monotonic_clock;
    // "shrink" decides on fewer workers only after waiting this long in its place phase for
    // the workers that are coming back (re-registering after a pause or a restart). Zero:
    // 2 heartbeat intervals, at most lease / 2.
    absl::Duration shrink_settle = absl::ZeroDuration();
    std::function<void(absl::string_view)> log;  // default: a timestamped line on stderr
    // Optional: job events are reported to it and it reads the worker and job counts at each
    // scrape. Must outlive the manager.
    CoordinatorMetrics* metrics = nullptr;
    // How long a multi-rank job's failure waits for the report of its root cause after the first
    // rank failed because of a peer (failure_report.h). Zero: 2 heartbeat intervals, clamped
    // to [0.2s, lease / 2].
    absl::Duration failure_window = absl::ZeroDuration();
    // What SubmitJob accepts (dtrain-coordinator's flags): a spec of at most max_spec_bytes
    // (JSON text, or the message's encoded size; --max_spec_bytes) and within `job_limits`
    // (--max_job_parameters, --max_job_steps, --max_job_workers). INVALID_ARGUMENT naming the
    // cap and its flag otherwise.
    int64_t max_spec_bytes = 1 << 20;
    // Queued jobs are placed in submission order, and one that does not fit does not hold back
    // smaller ones behind it, except once it has waited this long while enough live workers
    // exist to run it: then the jobs behind it that would take the same workers wait, so that
    // the workers freed go to it and a large job is not starved by a stream of small ones
    // (--queue_reservation). Zero: never.
    absl::Duration queue_reservation = absl::Minutes(10);
    // The most workers one owner's placed jobs may hold at once (Job.owner; jobs without an
    // owner are not counted): a queued job that would take its owner past it waits, and one that
    // needs more is refused at submit (--max_workers_per_owner). Zero: no cap.
    int64_t max_workers_per_owner = 0;
    // The highest JobSpec.priority a job of a caller other than an admin may have
    // (--max_user_priority; roles.h AuthorizePriority).
    int32_t max_user_priority = 0;
    // A queued job that has waited this long for workers preempts running jobs of a lower
    // priority (policy/preemption.h chooses which), each at its next sealed checkpoint: it
    // yields its workers, waits as a queued job of its priority would and resumes from that
    // checkpoint, losing no step and no restart (Recovery.preempted_by). Jobs that keep no
    // checkpoints are never preempted (--preempt_after). Zero: never.
    absl::Duration preempt_after = absl::ZeroDuration();
    // Ended jobs are deleted this long after they ended, records and directory, as `dtrain
    // delete --files` would (not one whose checkpoints a job not yet ended uses); checked once
    // a minute (--ended_job_retention). Zero: kept until deleted by hand.
    absl::Duration ended_job_retention = absl::ZeroDuration();
    plan::JobLimits job_limits;
    // A RUNNING multi-rank job that reports no step for this long is diagnosed once per stall
    // (`diagnose`): the one-line answer goes into its events and, should the run then fail,
    // into its FAILED or RECOVERING reason. Zero: never (--diagnose_stall_after).
    absl::Duration diagnose_stall_after = absl::ZeroDuration();
    // Starts a diagnosis of `job` (its id, state and placement with the peer secret) and calls
    // `done` with its summary later, on another thread, within `diagnosis_deadline` (plus a
    // callback's time) (dtrain-coordinator: diagnose_job.h's StartGathering, then Analyse).
    // `timed_out()`: the ranks of the run that failed on a communication timeout so far
    // (DiagnosisOptions::timed_out), to call once the answers are in (they are gone by then,
    // and more may have timed out meanwhile). When set, a run is also diagnosed once when a rank
    // reports such a timeout (FAILURE_PEER with DEADLINE_EXCEEDED) and no diagnosis was made
    // yet: before its ranks are stopped, so the still-live ones are asked; the failure waits for
    // the answer at most diagnosis_deadline.
    std::function<void(const Job& job, const ListWorkersResponse& workers,
                       std::function<std::vector<TimedOutRank>()> timed_out,
                       std::function<void(std::string summary)> done)>
        diagnose;
    absl::Duration diagnosis_deadline = absl::Seconds(2);
  };

  // Loads the active jobs of `store` (see Restart above). Does not start the scheduler thread.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(std::unique_ptr<JobStore> store,
                                                            Options options);
  ~JobManager();  // Stop()s

  // Starts the scheduler thread; Stop() ends it (bounded: one pass). Both idempotent.
  void Start();
  void Stop();
  // One scheduler pass now: sweep leases, recovery deadlines, place queued jobs. Tests with a
  // fake clock call this instead of Start().
  void RunSchedulerPass();

  // --- the RPCs (proto/coordinator.proto documents each) ---
  absl::StatusOr<RegisterWorkerResponse> RegisterWorker(const RegisterWorkerRequest& request);
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request);
  absl::StatusOr<ReportProgressResponse> ReportProgress(const ReportProgressRequest& request);
  // `deadline`: the client's; DeadlineExceeded, and no job created, when it passes before the
  // spec is read and checked. `owner`: the caller's certificate name (Job.owner).
  // `may_submit`: the caller's rules on the checked spec (the service's: roles.h
  // AuthorizePriority); an error refuses the job.
  absl::StatusOr<SubmitJobResponse> SubmitJob(
      const SubmitJobRequest& request, absl::Time deadline = absl::InfiniteFuture(),
      const std::string& owner = "",
      const std::function<absl::Status(const JobSpec&)>& may_submit = nullptr);
  absl::StatusOr<Job> GetJob(const std::string& job_id);
  // Sets job->queue_position when it is queued (WatchJob's summaries, read from the store).
  void FillQueuePosition(Job* job);
  // A page of job summaries, newest first (ListJobsRequest: limit 0 means 100, at most 1000;
  // states, name, owner and page_token filter; `mine` is the service's, which sets owner);
  // InvalidArgument for a page_token it did not give.
  absl::StatusOr<ListJobsResponse> ListJobs(const ListJobsRequest& request);
  // `by`: the caller's certificate name, recorded in the reason ("cancelled by alice: why");
  // empty for an insecure caller ("cancelled by user").
  absl::StatusOr<Job> CancelJob(const std::string& job_id, const std::string& reason,
                                const std::string& by = "");
  // Sets the JobSpec.priority of a job not ended (SetJobPriorityRequest): checked by the spec's
  // rules (plan/job_plan.h), kept with the spec, an event naming `by`, the queue's order at the
  // next pass. The job as GetJob answers. FailedPrecondition for a job that has ended.
  // Asks a RUNNING job for a checkpoint at its next step (CheckpointJobRequest; `by`: who, for
  // its event): ActiveJob::Planned::checkpoint_after until a step after it is sealed.
  absl::StatusOr<Job> CheckpointJob(const std::string& job_id, const std::string& by);
  absl::StatusOr<Job> SetJobPriority(const std::string& job_id, int32_t priority,
                                     const std::string& by = "");
  // Deletes an ended job, and with request.files its directory through a worker on its host
  // (proto/coordinator.proto DeleteJob; job_manager_delete.cc). Calls `done` once that worker
  // answered, or a few heartbeat intervals have passed, or shortly before `deadline` (real
  // time; checked by the scheduler's passes), whichever is first: no thread waits meanwhile.
  void DeleteJob(const DeleteJobRequest& request, absl::Time deadline,
                 std::function<void(absl::StatusOr<DeleteJobResponse>)> done);
  // Every DeleteJob waiting for a worker's answer is answered now (its removal pending): the
  // server is shutting down.
  void EndDeleteWaits() { removals_.ExpireWaiters(absl::InfiniteFuture()); }
  // The same, waiting for `done` (tests).
  absl::StatusOr<DeleteJobResponse> DeleteJob(const DeleteJobRequest& request,
                                              absl::Time deadline = absl::InfiniteFuture());
  // Text from a job's model, drawn by a live worker of the host that holds it (proto/
  // coordinator.proto SampleJob; job_manager_sample.cc). Calls `done` once that worker answered,
  // or at `deadline` (at most 10 minutes from now; checked by the scheduler's passes), or when
  // the worker is lost: no thread waits meanwhile.
  void SampleJob(const SampleJobRequest& request, absl::Time deadline,
                 std::function<void(absl::StatusOr<SampleJobResponse>)> done);
  // Every SampleJob waiting for a worker is answered now (UNAVAILABLE): the server is stopping.
  void EndSampleWaits() { samples_.EndAll("the coordinator is shutting down"); }
  ListWorkersResponse ListWorkers();
  absl::Status DeregisterWorker(const DeregisterWorkerRequest& request);
  absl::StatusOr<ForgetWorkerResponse> ForgetWorker(const std::string& worker_id);
  // Drains or undrains a worker (proto/coordinator.proto DrainWorker; job_manager_drain.cc).
  absl::StatusOr<DrainWorkerResponse> DrainWorker(const DrainWorkerRequest& request);
  absl::StatusOr<ListCheckpointsResponse> ListCheckpoints(const std::string& job_id);
  // Re-cuts the pipeline of a RUNNING job from each stage's measured compute seconds per step
  // (pp entries, or none: those of its latest straggler window; coordinator/policy/rebalance.h
  // decides) and restarts it on the new cut at its next sealed checkpoint (at once when none
  // comes before its end), resuming from it: a Recovery with rebalance_to, not counted against
  // max_restarts. `why` ("straggler policy, w2 flagged", "dtrain rebalance") starts the job's
  // event, which says either way what was decided. The decision; FailedPrecondition when the
  // job is not RUNNING, recovering, already moving to a cut or has no window scored,
  // InvalidArgument for times that do not match its stages.
  absl::StatusOr<RebalanceDecision> RebalanceJob(const std::string& job_id,
                                                 const std::vector<double>& stage_compute_s,
                                                 const std::string& why);

  // Watchers read the store and wait on the notifier (see JobNotifier).
  JobStore& store() { return *store_; }
  JobNotifier& notifier() { return notifier_; }
  const Options& options() const { return options_; }

 private:
  // A placement the scheduler's pass may apply (kPlace, kPlaceShrunk): the idle workers (Place
  // removes those it takes), the candidates that fit the job, the run's spec and its words.
  struct Placing {
    std::vector<plan::Candidate>* idle = nullptr;
    WorkerCounts* counts = nullptr;
    std::vector<plan::Candidate> candidates;
    JobSpec spec;    // the layout to place (a recovery's full, current or shrunk one)
    JobSpec shrunk;  // the smaller layout "shrink" would take (kPlaceShrunk)
    std::string shrink_note;
    absl::flat_hash_set<std::string> excluded;  // workers that failed the job twice
    std::string deferred_because;               // the last placement's error (PlaceRecovery)
  };

  class JobsLock;  // mu_, plus the notifications it defers until unlock

  JobManager(std::unique_ptr<JobStore> store, Options options);
  // Why no live worker could ever hold `job_plan` (placement's ResourceExhausted words: "rank 0
  // (dp0 pp0 tp0) needs 12.7 GiB; the largest worker has 4.6 GiB (w0)"), nullopt when some
  // could, or when too few workers of its kind are registered to tell.
  std::optional<std::string> NoWorkerCanHold(const JobPlan& job_plan) const;
  // --- restart (job_manager_restart.cc) ---
  absl::Status Recover();
  ActiveJob Restored(const Job& stored, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pause of this process ended (the registry gave every worker a lease of grace): says so
  // in the log and in every active job's events; a restart's wait for workers starts again.
  void NotePause(absl::Duration paused) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RegisterWorker: the active job the worker's registration concerns, and how.
  struct Returning {
    std::string attach;  // it runs this job's rank: re-attached
    std::optional<Delivery> resend;
    std::string resend_job;     // a PLACING job's assignment, sent again
    std::string abandoned_job;  // it came back without this job after a restart
  };
  Returning MatchReturning(const RegisterWorkerRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordReturning(const std::string& worker_id, const RegisterWorkerRequest& request,
                       const Returning& match) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Workers by state (registry) and jobs by state (store), for the metrics at scrape time.
  absl::StatusOr<CoordinatorMetrics::StateCounts> StateCounts();

  absl::Time Now() const { return options_.clock(); }
  void Log(absl::string_view line) const { options_.log(line); }
  void Wake();
  void SchedulerLoop();

  // --- deciding and applying (job_manager_apply.cc; job_decision.h) ---
  DecisionLimits Limits() const;
  // Decides what `job_id` does next from its record and `cluster`, applies it, and again until
  // the decision is to wait (or the job ended). The first failed application's status; the
  // record keeps what was observed, so the next pass decides again. `job_id` by value: callers
  // pass job.id, which an ending job frees.
  absl::Status Reconcile(std::string job_id, const ClusterView& cluster = {},
                         Placing* placing = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The one place a decision takes effect: the transition is checked against
  // job_transitions.h, saved, and only then memory changes and workers are told.
  absl::Status Apply(ActiveJob& job, const Decision& decision, Placing* placing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits a non-final state change (checked against the table), then updates memory, logs,
  // notifies.
  absl::Status Transition(ActiveJob& job, JobState state, const std::string& reason,
                          const Placement* placement = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits a final state (with the job's output for SUCCEEDED), stops the job's workers and
  // forgets it. When the store fails the job keeps its state in memory and the pass retries.
  absl::Status EndJob(const std::string& job_id, JobState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every rank succeeded: a finishing recovery is done, the end reason saved, SUCCEEDED.
  absl::Status Succeed(ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PLACING -> RUNNING.
  absl::Status MarkRunning(ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a coordinator restart a worker did not come back (or came back without the job).
  absl::Status WorkersNotReturned(ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RECOVERING: records `recovery` (its number, start and last step filled in here) and the
  // state, saved first; then stops every rank of the run (`failed_worker` aside, if any) and
  // says `why`. On a failed save nothing in memory changed: the decision is taken again.
  absl::Status BeginRecovery(ActiveJob& job, Recovery recovery, const std::string& why,
                             const std::string& failed_worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- failures and recoveries (job_manager_recovery.cc) ---
  void HandleFault(const WorkerFault& fault) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a rank's failure, then reconciles: the job ends now when the root cause is known
  // (or it has one rank, or every rank has failed), else within the failure window.
  void AddFailure(ActiveJob& job, RankFailure failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Names the root cause of the job's failures, then Fail.
  absl::Status FailWithRootCause(ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job failed for `cause`, naming `worker` ("" if none): DecideAfterFailure says whether
  // it recovers (a restart, maintenance when `stopped`, finishing when its last step is
  // sealed) or ends FAILED naming every failure. `silent`: how long the failed worker had been
  // silent (the detect phase), when known.
  absl::Status Fail(ActiveJob& job, const std::string& cause, const std::string& worker,
                    bool curable, absl::Duration silent = absl::ZeroDuration(),
                    bool stopped = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's latest sealed checkpoint is at its last step, and no recovery finished it yet.
  bool FinalStepSealed(const ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a planned restart a policy proposes, unless one is proposed already; the caller
  // reconciles (the decision begins it), never while iterating jobs_.
  void ProposeRestart(ActiveJob& job, Recovery recovery, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A recovery of a shrunk job could not place its submitted layout (`placing`: the workers'
  // memory): it resumes on the layout it ran on, and no grow back is asked for again until the
  // idle workers change (ActiveJob::grow_refused_on). False when that does not apply (not shrunk,
  // or already refused: the placement waits as before).
  bool RefuseSubmittedLayout(ActiveJob& job, const Placing& placing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A job "shrink" put on fewer workers goes back to its submitted layout at the checkpoint of
  // `sealed_step` when enough workers are idle again (a Recovery with grow set).
  void MaybeGrowBack(ActiveJob& job, int64_t sealed_step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The idle workers a shrunk `job` could grow back with at a seal now (enough to run its
  // submitted layout with its own), or nullopt: not shrunk, not able to wait for a seal, too few
  // idle, or the same workers its submitted layout did not fit (grow_refused_on). O(1) unless
  // it is shrunk (then a count of the workers and a scan of the idle ones, every pass).
  std::optional<int64_t> IdleToGrowBack(const ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One scheduler step of a RECOVERING job: its view of the cluster, decided and applied: wait
  // for the old ranks to stop, then place it on `idle` (which loses the workers it takes),
  // shrink it, wait, or fail it.
  void AdvanceRecovery(ActiveJob& job, std::vector<plan::Candidate>* idle, WorkerCounts* counts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ClusterView RecoveryView(ActiveJob& job, Placing* placing) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndStopPhase(ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kPlace/kPlaceShrunk of a recovery; false when the placement was deferred.
  bool PlaceRecovery(ActiveJob& job, bool shrunk, Placing& placing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The recovery waits for workers (`settling`: "shrink" waits for returning ones first): its
  // reason restated; FAILED once fault_tolerance.wait_for passed (`expired`).
  void RecoveryWaits(ActiveJob& job, const Placing& placing, int needed, bool settling,
                     bool expired) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A recovering job's reason, changed (a write and a log line) only when it differs.
  void SetRecoveringReason(ActiveJob& job, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveRecoveries(ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the current phase of the open recovery: its duration (ms) since its start.
  int64_t EndPhase(ActiveJob& job);
  // A worker of the run a recovery replaced says it got to `step`: the recovery's last step
  // (and steps redone) count it. The coordinator may not have heard of those steps (a pause).
  void NoteOldRunStep(ActiveJob& job, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- progress reports (job_manager_report.cc) ---
  struct Reporter {
    int rank;
    std::string who;  // "worker w2 (dp0 pp1 tp0)"
    LineSource source;
  };
  // ReportProgress before its database errors are made retryable.
  absl::StatusOr<ReportProgressResponse> RecordReport(const ReportProgressRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A step report of the run a recovery stopped (RecoveryState::stopped_rank_of), trained
  // before its stop reached it: its steps are recorded while the recovery waits for the new
  // run's first step. False for any other report (refused as before).
  absl::StatusOr<bool> RecordStoppedRunSteps(ActiveJob& job, const ReportProgressRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records what one report carries (the reporter checked and its job active).
  absl::Status ApplyReport(ActiveJob& job, const Reporter& from,
                           const ReportProgressRequest& request, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Steps of the job in increasing order (one report's), recorded in one transaction.
  absl::Status OnSteps(ActiveJob& job, const Reporter& from, std::vector<StepMetrics> steps)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `sealed_ms`: when the worker sealed it (its report's time).
  absl::Status OnCheckpoint(ActiveJob& job, const CheckpointSealed& sealed, int64_t sealed_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every rank skipped a checkpoint step (a full disk) that a plan may wait for: a preemption
  // and a drained worker go ahead now from the latest sealed checkpoint, a re-cut is dropped.
  void GoAheadWithoutSeal(ActiveJob& job, const CheckpointSkipped& skipped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OnCheckpointSkipped(ActiveJob& job, const CheckpointSkipped& skipped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OnLocation(ActiveJob& job, const JobLocation& at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OnOutcome(ActiveJob& job, const Reporter& from, const ReportProgressRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker reported its job; PLACING -> RUNNING once every rank has.
  void MarkAcked(ActiveJob& job, const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- diagnosis (job_manager_diagnosis.cc) ---
  // Starts the diagnosis of every RUNNING multi-rank job without a step for
  // diagnose_stall_after, or with a rank that timed out (once per run; outside mu_);
  // RecordStallDiagnosis takes its answer.
  void DiagnoseStalledJobs();
  void RecordStallDiagnosis(const std::string& job_id, std::string summary);
  // A rank of `job` timed out waiting on peers (`failure`, not recorded yet): the run is to be
  // diagnosed before it is stopped (Options::diagnose), and its failure waits for the answer.
  void NoteTimeout(ActiveJob& job, const RankFailure& failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ranks of `job_id`'s run that reported a communication timeout so far, with the ranks
  // they blamed (Options::diagnose's timed_out).
  std::vector<TimedOutRank> TimedOutRanks(const std::string& job_id);

  // --- stragglers (job_manager_stragglers.cc; JobSpec.stragglers) ---
  // Heartbeat: keeps the rank's step timings for the next pass (timings_mu_ only, not mu_).
  void QueueTimings(const HeartbeatRequest& request);
  // Each pass: feeds the queued timings to their jobs' scorers, scores every RUNNING multi-rank
  // job, and acts on a rank newly flagged or cleared (an event; the policy).
  void ScoreStragglers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The spec's policy for a newly flagged rank: "report" (the event only), "replace" (swap its
  // worker for an idle spare now: a Recovery with replaced_worker), "rebalance".
  void ActOnStraggler(ActiveJob& job, const StragglerScore& score)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // GetJob: the active job's latest scores into job->stragglers.
  void AddStragglerScores(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // GetJob and ListJobs: what the store does not keep of an active `job`: its queue position
  // (from `positions` when given, else QueuePositions()), or a running job's live reason (a
  // wait for disk space, a stall).
  void AddLiveState(Job* job, const absl::flat_hash_map<std::string, int32_t>* positions = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Job.queue_position of every queued job (by id), from the scheduler's order now: 1 for the
  // next that the scheduler tries for its kind of workers, N when N - 1 queued jobs that could
  // take the same workers come before it. A job being placed now has none (it counts before
  // the others). One pass over the queue.
  absl::flat_hash_map<std::string, int32_t> QueuePositions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a scheduler pass: wakes the watchers of each queued job whose position changed since
  // they were last woken for it (WatchJob sends it: `dtrain watch` prints "position 2 in the
  // queue" as it moves).
  void AnnounceQueuePositions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds checkpoints_wanted_ from the active jobs (each scheduler pass).
  void PublishCheckpointsWanted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The running job's entry of checkpoints_wanted_, as a heartbeat of its worker carries it.
  void AddCheckpointRequest(const std::string& job_id, HeartbeatResponse* response);

  // --- deleting ended jobs (job_manager_delete.cc) ---
  // FailedPrecondition naming the job not ended yet whose resume_from or init_checkpoint lies
  // in `job`'s directory.
  absl::Status CheckNotInUse(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The one rule of deleting, for DeleteJob and the retention: `job` must have ended and its
  // checkpoints be unused; its records go, and with `files` its directory is queued for a
  // worker (returned). `why` goes in the log line.
  absl::StatusOr<std::optional<PendingDirRemoval>> DeleteLocked(const Job& job, bool files,
                                                                absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Heartbeat: the worker's answers about directories, and the removals assigned to it (no
  // registry lookup: the scheduler pass reassigns those of a gone worker).
  void TakeDirRemovals(const HeartbeatRequest& request, HeartbeatResponse* response);
  // An answer about a pending removal (a worker's, or ForgetWorker's DIR_REMOVAL_ABANDONED):
  // it ends in the store, the log and the metrics, and its DeleteJob waiters hear it. False
  // when it was answered before.
  bool FinishDirRemoval(const JobDirRemoved& answer);
  // Create: the removals the store still holds (a restart does not forget them).
  absl::Status RestoreDirRemovals();
  // A pass: the jobs ended longer than Options::ended_job_retention ago go (once a minute).
  void DeleteExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- drain (job_manager_drain.cc) ---
  absl::StatusOr<DrainWorkerResponse> DrainLocked(const DrainWorkerRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Restarts `job` without the drained `worker_id` now: a maintenance Recovery.
  void MoveOffDrained(ActiveJob& job, const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker registered (`result`), attached to `running` ("" none): a drain saved before this
  // coordinator started applies again to its session (its job moves off it at its next sealed
  // checkpoint), or is forgotten for a new session.
  void RestoreDrain(const std::string& worker_id, const WorkerRegistry::RegisterResult& result,
                    const std::string& running) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `worker_id`, running a rank of `job`, was drained: the job moves off it at its next sealed
  // checkpoint, or at once (`now`, or a job that cannot wait for one). True when at once. `job`
  // may be gone after a true return.
  bool PlanMoveOffDrained(ActiveJob& job, const std::string& worker_id, bool now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A checkpoint of `job` was sealed: it moves off the worker drained meanwhile, if any.
  void MaybeMoveOffDrained(ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- preemption (job_manager_preempt.cc) ---
  // What preemption does for a queued job: the workers coming free for it (its preemptions
  // begun now or earlier), or, before it has waited Options::preempt_after, whether it would
  // preempt then (as the workers are now).
  // `holds`: it has preempted jobs not placed again (their workers are its own: it holds back
  // the jobs behind it, as a reservation does) and the live workers could run it.
  struct Preemption {
    int64_t coming = 0;
    bool later = false;
    bool holds = false;
  };
  // Queued `waiter`, which did not fit in this pass with the `usable` idle workers for it,
  // preempts running jobs of a lower priority once it has waited Options::preempt_after.
  Preemption MaybePreempt(const ActiveJob& waiter, const std::vector<plan::Candidate>& usable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The running jobs `waiter` may preempt (policy/preemption.h chooses among them).
  std::vector<PreemptionCandidate> PreemptionCandidates(const ActiveJob& waiter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a queued job's reason adds for `preemption`: "; 2 workers of jobs of a lower priority
  // come free at their next sealed checkpoints (preempted)", "; it preempts jobs of a lower
  // priority once queued for 2m (--preempt_after)", or nothing.
  std::string PreemptionNote(const Preemption& preemption) const;
  // The preemptions of `waiter` in flight: the workers they will free (its victims' runs, their
  // ranks stopping, and those stopped but not among `usable`, when given), and whether it holds.
  Preemption PreemptionsOf(const ActiveJob& waiter,
                           const std::vector<plan::Candidate>* usable = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A checkpoint of `job` was sealed at `step`: it yields its workers to the job it was
  // preempted by (a planned restart), if that one still waits.
  void MaybeYield(ActiveJob& job, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A preempted job's place phase: the queued jobs of a higher priority that the live workers
  // could run, which it waits behind (ClusterView::queued_ahead).
  int QueuedAheadOfPreempted(const ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- rebalance (job_manager_rebalance.cc) ---
  // RebalanceJob with the lock held (the straggler policy calls it from a pass).
  absl::StatusOr<RebalanceDecision> RebalanceLocked(ActiveJob& job,
                                                    absl::Span<const double> stage_compute_s,
                                                    const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Begins the rebalance decided for `job`, if any, at the checkpoint of `step`.
  void MaybeRebalanceAt(ActiveJob& job, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- the scheduler's pass (job_manager_schedule.cc) ---
  ActiveJob* FindActive(absl::string_view job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // resume_from = a job id -> that job's latest sealed step (absolute), noted in `notes`.
  absl::Status ResolveResumeFrom(JobSpec* spec, std::vector<std::string>* notes);
  // Expired leases become failures; every job's record is reconciled (a final state to retry,
  // a failure window over, workers not back after a restart, a planned restart to retry).
  void SweepLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places a queued job on `idle` workers (removing those it takes) and moves it to PLACING.
  // `candidates`: the idle workers that can run it (its device kind).
  // `spec`: the run's spec (job.spec, or a recovery's CurrentRunSpec or shrunk one).
  absl::Status Place(ActiveJob& job, const JobSpec& spec,
                     const std::vector<plan::Candidate>& candidates,
                     std::vector<plan::Candidate>* idle, WorkerCounts* counts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string WaitingReason(const JobSpec& spec, const WorkerCounts& counts);
  // Whether queued `job`, which did not fit in this pass, now holds back the jobs behind it
  // that would take the same workers (Options::queue_reservation).
  bool ReservesWorkers(const ActiveJob& job, const WorkerCounts& counts);
  // Whether the live workers (`counts`, and those of its device kind) could run a job of
  // `spec`: a job waiting for workers that may never come (too few of its kind) holds back
  // nobody, by a reservation or a preemption.
  bool LiveWorkersCouldRun(const JobSpec& spec, const WorkerCounts& counts);
  // Workers held by each owner's placed jobs (PLACING, RUNNING, RECOVERING) now.
  absl::flat_hash_map<std::string, int64_t> WorkersHeldByOwner() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The queue's order now (job_manager_internal.h QueueOrder): with each owner's workers held.
  QueueOrder QueueOrderNow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The one rule of Options::max_workers_per_owner: why `owner`'s job needing `needed` workers
  // waits while the owner's jobs hold `held` ("waiting for alice's jobs to free workers: they
  // hold 6 and this one needs 4, more than the 8 one owner may hold
  // (--max_workers_per_owner)"), or nothing when it may be placed.
  std::optional<std::string> OwnerQuotaWait(const std::string& owner, int64_t needed,
                                            int64_t held) const;
  // A queued job's reason, changed (a write and a log line) only when it differs.
  void SetQueuedReason(ActiveJob& job, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The queued jobs (none ending) in the queue's order (QueueOrderNow): what the scheduler pass
  // tries and the reservation's holder is chosen from.
  std::vector<ActiveJob*> QueueInOrder() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The queued job that a new job of `spec` would wait behind now, or null.
  const ActiveJob* HolderFor(const JobSpec& spec, const WorkerCounts& counts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a job of `spec` that `holder` holds back waits: "waiting behind job-000007, queued for
  // 4 workers for longer than --queue_reservation (10m): ..." when the idle workers would fit
  // it, else WaitingReason. Stored as the job's reason, so its words change only when the cause
  // does (every change is a write and a log line).
  // A new queued job's first reason: its owner's cap, the job it waits behind, or the workers.
  std::string ReasonAtSubmit(const JobSpec& spec, const std::string& owner,
                             const WorkerCounts& counts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `by_preemption`: the holder holds the workers of the jobs it preempted.
  std::string HeldBackReason(const JobSpec& spec, const ActiveJob& holder,
                             const WorkerCounts& counts, bool by_preemption);
  // The scheduler pass's queued jobs, in the queue's order (QueueOrder), on `idle` (what they
  // take leaves it and `counts`).
  void PlaceQueued(const std::vector<ActiveJob*>& queued, std::vector<plan::Candidate>* idle,
                   WorkerCounts* counts);
  void Event(const std::string& job_id, const std::string& text, const LineSource& source = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowMs() const { return absl::ToUnixMillis(Now()); }

  const Options options_;
  const std::unique_ptr<JobStore> store_;
  WorkerRegistry registry_;
  JobNotifier notifier_;

  absl::Mutex mu_;
  std::map<int64_t, ActiveJob> jobs_ ABSL_GUARDED_BY(mu_);   // active, by submission number
  std::vector<std::string> to_notify_ ABSL_GUARDED_BY(mu_);  // watchers to wake on unlock
  std::vector<std::string> to_forget_ ABSL_GUARDED_BY(mu_);  // ended jobs
  absl::Time retention_swept_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  DirRemovals removals_{absl::Seconds(10)};
  SampleAsks samples_;

  // The running jobs whose next sealed checkpoint a plan waits for (ActiveJob::WaitsForNextSeal),
  // by id, with their last sealed step: published by each scheduler pass, read by Heartbeat
  // under this lock alone (not the jobs' lock, which a heartbeat never takes).
  absl::Mutex wanted_mu_;
  absl::flat_hash_map<std::string, int64_t> checkpoints_wanted_ ABSL_GUARDED_BY(wanted_mu_);

  absl::Mutex wake_mu_;
  bool wake_ ABSL_GUARDED_BY(wake_mu_) = false;
  bool stop_ ABSL_GUARDED_BY(wake_mu_) = false;
  int diagnosing_ ABSL_GUARDED_BY(wake_mu_) = 0;  // stall diagnoses not answered yet

  // Step timings from heartbeats (worker id, timing) by job id, until the next pass takes them.
  absl::Mutex timings_mu_;  // after mu_ when both are held
  absl::flat_hash_map<std::string, std::vector<std::pair<std::string, RankTiming>>> timings_
      ABSL_GUARDED_BY(timings_mu_);
  std::thread scheduler_;
};

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_MANAGER_H_
