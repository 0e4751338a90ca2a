// WorkerRegistry: the workers the coordinator knows, their sessions, leases and jobs, and the
// work waiting to be delivered to them in heartbeat responses.
//
// A worker is identified by its operator-chosen worker_id; each process start brings a new
// session_id. A session holds the id while its lease lasts (renewed by every heartbeat and
// progress report). A worker is
//   IDLE  live, no job;
//   BUSY  live, with a job: assigned (assignment queued or delivered, not yet acknowledged),
//         running (acknowledged: it reported running_job_id), being cancelled, or finishing
//         (its outcome arrived); in the last two until a heartbeat no longer names the job:
//         until then the worker may still serve the job's peer service on its address, which
//         would refuse the next job's ranks (the worker heartbeats as soon as it has left);
//   LOST  its lease ran out (Sweep); kept for listings until it registers again.
// A live worker may be drained (SetDraining: maintenance): it takes no new job, and is listed
// DRAINED instead of IDLE.
//
// Heartbeat is O(1) under one short hold of the registry mutex; every scan over all workers
// (Sweep, IdleCandidates, Counts, List) runs on the scheduler's thread, not on heartbeats, and
// copies no worker under the mutex on the scheduler's path: each worker's registration is kept
// as an immutable shared WorkerInfo (Record::registered) that IdleCandidates hands out by
// pointer, so a pass over 50,000 idle workers holds the mutex for pointer copies only.
// Time is a parameter (absl::Time now), so lease tests take no wall time.
//
// A pause of the coordinator's own process (pause_detector.h) is noticed at the first call
// after it, under the mutex and before that call judges any lease: every live worker then gets
// a whole lease from now to report again, as after a coordinator restart, so that no worker is
// declared lost for the coordinator's own silence.
#ifndef DTRAIN_COORDINATOR_WORKER_REGISTRY_H_
#define DTRAIN_COORDINATOR_WORKER_REGISTRY_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "coordinator/heartbeat_pace.h"
#include "coordinator/pause_detector.h"
#include "plan/placement.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

// Something wrong with a worker's part in a job, found by Sweep.
struct WorkerFault {
  enum Kind {
    kLost,         // no heartbeat for the lease; the worker is now LOST
    kDropped,      // it acknowledged the job, then reported not running it for a whole lease
                   // without an outcome
    kNotAccepted,  // it got the assignment but did not acknowledge it within the lease, or
                   // did not stop another job within a lease so as to be given it
  };
  Kind kind = kLost;
  std::string worker_id;
  std::string job_id;     // the job it held; empty for a lost idle worker
  absl::Duration silent;  // kLost: time since its last heartbeat
};

// Work queued for a worker: rank `rank_index` of a placed job. The JobAssignment (job id, spec,
// whole placement; rank unset) is made once per placement and shared by every rank of the job;
// only the rank's own part of it is built, on delivery.
struct Delivery {
  std::shared_ptr<const JobAssignment> job;
  int rank_index = 0;
  std::string job_id() const { return job->job_id(); }
  // The message a worker receives: its own part of the job (rank_assignment.h
  // AssignmentForRank), whatever the job's size.
  JobAssignment ToProto() const;
};

struct WorkerCounts {
  int idle = 0, busy = 0, lost = 0;
};

// The memory of one host's live CPU workers that share it (same WorkerInfo.host_id).
struct HostShare {
  int64_t host_bytes = 0;  // the host's memory (host_memory_bytes)
  int live = 0;            // live workers on the host
  int idle = 0;            // of which idle
  int64_t reserved = 0;    // the memory of the ranks placed on its busy workers
};
// The memory a CPU worker may be given (WorkerInfo.device.memory_bytes): the smaller of what it
// offered and its equal part of the host (host_bytes / live), and, when `idle`, of the host's
// unreserved memory divided among its idle workers, so that whatever is placed on a host's idle
// workers at once fits beside what runs there: the coordinator never overcommits a host.
// Example: 5 workers offering 23 GiB each on a 23 GiB host get 4.6 GiB each; with a 6 GiB job
// on one of them, each of the 4 idle ones gets (23 - 6) / 4 = 4.25 GiB.
int64_t MemoryShare(int64_t offered, const HostShare& host, bool idle);

class WorkerRegistry {
 public:
  // `monotonic` null: no pause detection (tests on a fake clock). `pause_threshold`: the
  // longest gap between two calls that is not a pause (a heartbeat interval).
  explicit WorkerRegistry(absl::Duration lease, MonotonicClock monotonic = nullptr,
                          absl::Duration pause_threshold = absl::Seconds(1))
      : base_{pause_threshold, lease},
        pace_{pause_threshold, lease},
        pauses_(pause_threshold, std::move(monotonic)) {}

  // Heartbeats paced by the cluster's size (heartbeat_pace.h): `base` (--heartbeat_interval,
  // --lease) while the live workers' heartbeats stay within `max_rate` a second, longer beyond.
  // The pace is recomputed at every Sweep; every heartbeat answer carries its interval
  // (HeartbeatResponse.heartbeat_interval_ms) and each worker's lease is the pace's lease as of
  // its last heartbeat. Without a call: the constructor's lease, no interval in the answers.
  void SetPacing(HeartbeatPace base, double max_rate);
  // The pace now (what RegisterWorker answers).
  HeartbeatPace pace() const;
  absl::Duration lease() const { return pace().lease; }

  struct RegisterResult {
    bool new_session = false;  // false: the same session registered again (a retry)
    // The id's previous session had expired (or was superseded) while holding a job: its rank
    // is lost.
    std::optional<WorkerFault> replaced;
    // A new session of a drained worker: a drain restored after a coordinator restart (the
    // same session as drained: RestoreDrains), or one ended (a new process, back from
    // maintenance), whose record the caller forgets.
    bool drain_restored = false;
    bool drain_ended = false;
  };
  // Registers `request`'s session. InvalidArgument for an empty worker_id or session_id;
  // AlreadyExists when another session holds the id and its lease has not run out, unless the
  // request's previous_session_id names that session (its process is proven dead: it is
  // replaced at once, its job reported in `replaced`). The same
  // session registering again keeps its job. With `attach_job` the worker is marked running
  // that job (it re-registered after a coordinator restart); with `assign` the assignment is
  // queued for its next heartbeat. The caller decides both from the job table.
  absl::StatusOr<RegisterResult> Register(const RegisterWorkerRequest& request, absl::Time now,
                                          const std::string& attach_job = "",
                                          const Delivery* assign = nullptr);

  struct HeartbeatResult {
    HeartbeatResponse response;
    std::string acked_job;  // set when this heartbeat first reported the assigned job running
    bool released = false;  // the worker became idle (it left a cancelled or finished job)
  };
  // Renews the lease and answers with queued work: the assignment (once), cancels for jobs the
  // worker should not run. register_again for an unknown or expired session. InvalidArgument
  // for an empty worker_id.
  absl::StatusOr<HeartbeatResult> Heartbeat(const HeartbeatRequest& request, absl::Time now);

  // A progress report from (worker, session) about `job_id`: renews the lease and counts as the
  // acknowledgement (returns true when it is the first). FailedPrecondition when the session is
  // not the worker's live one or the worker no longer holds the job.
  absl::StatusOr<bool> Report(const std::string& worker_id, const std::string& session_id,
                              const std::string& job_id, absl::Time now);
  // Whether (worker, session) had its report numbered `seq` (ReportProgressRequest.report_seq)
  // recorded already: a copy sent again after a lost answer. 0 is never recorded. Kept per
  // worker for its newest session, across a lapsed lease and a registration again.
  bool ReportRecorded(const std::string& worker_id, const std::string& session_id,
                      uint64_t seq) const;
  // Notes that the report numbered `seq` of (worker, session) was recorded.
  void NoteReportRecorded(const std::string& worker_id, const std::string& session_id,
                          uint64_t seq);

  // Reserves the worker of every rank of `job`'s placement, all or none: FailedPrecondition
  // (nothing changed) unless each is live and idle. The assignment is held: no heartbeat
  // delivers it before Publish, so that the job manager saves the placement first (a failed
  // save is undone by CancelJob, and no worker ever saw the job).
  absl::Status Assign(std::shared_ptr<const JobAssignment> job, absl::Time now);
  // Releases `job`'s held assignment (Assign) to its workers: each receives its rank in its
  // next heartbeat response. A worker no longer holding the job (lost, re-registered meanwhile)
  // is skipped: its loss is reported as for any other.
  void Publish(const JobAssignment& job);
  // Stops `job_id` on `workers`: an undelivered assignment is dropped (the worker is idle at
  // once); otherwise the worker is told to cancel in its heartbeats and stays BUSY until it
  // reports that it no longer runs the job.
  void CancelJob(const std::string& job_id, absl::Span<const std::string> workers);
  // The worker finished `job_id` (its outcome arrived): it becomes idle once a heartbeat no
  // longer names the job (HeartbeatResult::released); still naming it a lease later, it is
  // told to cancel it (it drops the job's last reports and leaves).
  void Release(const std::string& worker_id, const std::string& job_id, absl::Time now);

  // Removes the live session (worker_id, session_id): a worker leaving on purpose. Returns the
  // job it held ("" when none); NotFound when that session is not the worker's live one.
  absl::StatusOr<std::string> Deregister(const std::string& worker_id,
                                         const std::string& session_id);
  // Removes a LOST worker. NotFound for an unknown id; FailedPrecondition for a live one.
  absl::Status Forget(const std::string& worker_id);
  // Drains (or undrains) a live worker: drained, it is left out of IdleWorkers and Assign, and
  // listed DRAINED once idle; a new session undrains it. Returns the job it holds ("" when
  // none). NotFound for an unknown id; FailedPrecondition for a LOST one.
  absl::StatusOr<std::string> SetDraining(const std::string& worker_id, bool draining);
  // The session a drain of the worker applies to (what the store keeps, before SetDraining).
  // NotFound for an unknown id; FailedPrecondition for a LOST one.
  absl::StatusOr<std::string> DrainableSession(const std::string& worker_id) const;
  // The drains saved before a coordinator restart, by worker id: the session that was drained.
  // A worker registering again with that session is drained again (drain_restored); with
  // another, the drain has ended (drain_ended).
  void RestoreDrains(absl::flat_hash_map<std::string, std::string> session_by_worker);
  // The worker as List shows it. NotFound for an unknown id.
  absl::StatusOr<WorkerInfo> Get(const std::string& worker_id) const;

  // Marks workers whose lease ran out LOST and finds stuck assignments: O(workers) when a lease
  // or a wait may have ended by `now`, O(1) before (the earliest such time is kept: most of the
  // scheduler's passes at 50,000 workers then hold the mutex for a comparison, not a scan).
  std::vector<WorkerFault> Sweep(absl::Time now);

  // The pauses of this process noticed since the last call (their total length), once.
  std::optional<absl::Duration> TakePause();

  // Live idle workers, sorted by worker_id, each with its memory share (MemoryShare);
  // O(workers), each copied: for the rare scans (a spare for a straggler, growing back).
  std::vector<WorkerInfo> IdleWorkers() const;
  // The same workers as placement reads them, in no particular order: each worker as it
  // registered (shared, not copied: its state, job and heartbeat time are not current there)
  // and the memory it may be given (memory_bytes: its MemoryShare). What the scheduler places
  // with: O(workers) pointer copies under the mutex, no WorkerInfo copied.
  std::vector<plan::Candidate> IdleCandidates() const;
  WorkerCounts Counts() const;
  // Live workers that `accept` takes and that, with nothing running on their host (MemoryShare,
  // not idle), have at least `bytes` (or do not say how much they have). O(workers) without
  // copying them: SubmitJob's fast answer to "could the job ever fit" at 50,000 workers.
  int64_t CountWithRoom(int64_t bytes, absl::FunctionRef<bool(const WorkerInfo&)> accept) const;
  // The live workers `accept` takes: how many, and (worker id, allowed_roots) of those that
  // declared roots, sorted by worker id (what plan/spec_paths.h CheckSpecPaths reads). One pass
  // without copying the workers: SubmitJob's paths rule at 50,000 workers.
  struct LiveRoots {
    int64_t count = 0;
    std::vector<std::pair<std::string, std::vector<std::string>>> roots;
  };
  LiveRoots RootsOfLive(absl::FunctionRef<bool(const WorkerInfo&)> accept) const;
  // Every known worker, sorted by worker_id (live CPU workers with their MemoryShare).
  std::vector<WorkerInfo> List() const;
  // The job the worker holds ("" when idle, lost or unknown).
  std::string JobOf(const std::string& worker_id) const;
  // Whether the worker is registered and not LOST.
  bool IsLive(const std::string& worker_id) const;
  // A live worker with this host label (the smallest id), "" when none; O(workers), no copies.
  std::string LiveWorkerOnHost(const std::string& host_label) const;
  // Whether any worker of that host label is registered, live or LOST.
  bool AnyWorkerOnHost(const std::string& host_label) const;
  // The last step the worker said (heartbeat, registration) it reached in `job_id`; -1 when it
  // never said it runs that job.
  int64_t RunningStep(const std::string& worker_id, const std::string& job_id) const;

 private:
  struct Record {
    WorkerInfo info;  // state, job_id and times kept current
    // `info` as of its last registration, shared with the placements that read it
    // (IdleCandidates); replaced, never changed, by the next registration.
    std::shared_ptr<const WorkerInfo> registered;
    uint32_t host = 0;  // its host label's number (host_numbers_)
    std::string session_id;
    absl::Time deadline;   // lease end
    absl::Duration lease;  // the lease of the pace it was last told (heartbeat_pace.h)
    bool lost = false;
    bool draining = false;  // also info.draining
    // The job, when BUSY (also info.job_id).
    bool acked = false;
    bool cancel_requested = false;
    std::optional<absl::Time> finishing_since;  // Release: its outcome arrived
    std::optional<Delivery> pending;            // assignment not yet delivered
    bool held = false;  // `pending` waits for Publish: no heartbeat delivers it yet
    absl::Time delivered_at = absl::InfinitePast();
    std::optional<absl::Time> dropped_since;
    // `pending` is withheld because the worker still names another job (told to stop it):
    // since when. A lease of it is a fault, like an assignment delivered and not accepted.
    std::optional<absl::Time> withheld_since;
    std::string finished_job;  // last job it finished; no cancels for it while it winds down
    // What it last said it runs (running_job_id, running_step), whatever it holds.
    std::string running_job;
    int64_t running_step = 0;
    int64_t reserved = 0;  // its rank's RankAssignment.memory_bytes while BUSY
  };
  // The live CPU workers' hosts by host id, and `r.info` with device.memory_bytes set to its
  // MemoryShare (CPU workers with a host id).
  absl::flat_hash_map<std::string, HostShare> HostSharesLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static WorkerInfo WithShare(const Record& r,
                              const absl::flat_hash_map<std::string, HostShare>& hosts);
  // The memory `r` may be given (what WithShare sets as device.memory_bytes): its MemoryShare
  // for a live CPU worker with a host id, else what it offered.
  static int64_t MemoryOf(const Record& r,
                          const absl::flat_hash_map<std::string, HostShare>& hosts);
  static void SetJob(Record& r, const std::string& job_id);
  // A new session of `r` registers: its drain ends, or one RestoreDrains kept applies again.
  void DrainOfNewSessionLocked(const RegisterWorkerRequest& request, Record& r,
                               RegisterResult& result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `info` (r.info, or WithShare's) with its listed state (DRAINED for a drained idle worker).
  static WorkerInfo Listed(const Record& r, WorkerInfo info);
  static WorkerState ListedState(const Record& r);
  // Observes the process working at `now`; after a pause, a lease of grace for every worker.
  void NoticePauseLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HeartbeatLocked(const HeartbeatRequest& request, absl::Time now, HeartbeatResult* result,
                       std::optional<Delivery>* delivery) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Brings next_check_ down to the first time Sweep may find something about `r`: its lease's
  // end, and the end of its wait for a job it dropped or did not acknowledge. Called wherever
  // those times are set.
  void WatchLocked(const Record& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  HeartbeatPace base_ ABSL_GUARDED_BY(mu_);
  HeartbeatPace pace_ ABSL_GUARDED_BY(mu_);
  double max_rate_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no pacing, no interval in the answers
  absl::flat_hash_map<std::string, Record> workers_ ABSL_GUARDED_BY(mu_);
  // Worker id -> its newest session and the highest report number recorded from it.
  absl::flat_hash_map<std::string, std::pair<std::string, uint64_t>> recorded_reports_
      ABSL_GUARDED_BY(mu_);
  // RestoreDrains' drains whose worker has not registered since.
  absl::flat_hash_map<std::string, std::string> restored_drains_ ABSL_GUARDED_BY(mu_);
  // Sweep scans every worker only after this (a lower bound of WatchLocked's times, made exact
  // by each scan); live_ counts the workers not LOST, for the pace.
  absl::Time next_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t live_ ABSL_GUARDED_BY(mu_) = 0;
  // Every host label registered so far, numbered from 0 (plan::Candidate::host); never shrinks.
  absl::flat_hash_map<std::string, uint32_t> host_numbers_ ABSL_GUARDED_BY(mu_);
  PauseDetector pauses_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Duration> paused_ ABSL_GUARDED_BY(mu_);  // not taken yet
};

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_WORKER_REGISTRY_H_
