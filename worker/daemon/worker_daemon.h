// WorkerDaemon: the life of a dtrain worker against the coordinator (proto/coordinator.proto).
//
// Two threads. The control thread (Run) registers, heartbeats every heartbeat_interval_ms,
// starts assignments, stops cancelled jobs and delivers progress reports; the training thread
// runs one JobRunner at a time and only queues reports, so a slow or absent coordinator never
// stalls training.
//
//   register ──ok──> heartbeat loop ──register_again / heartbeat error──> register again
//      ^  └─error: wait Backoff (100 ms doubling to max_backoff, 2 s)          │
//      └──────────────────────────────────────────────────────────────────────┘
//
// Registration carries the running job (running_job_id / running_step) so a restarted
// coordinator re-attaches a job that kept training while it was down. A job counts as running
// until its outcome is delivered and the job is destroyed (a multi-worker rank's peer service
// with it); the worker then heartbeats at once, and only a heartbeat that no longer names the
// job makes the coordinator count it idle (another job's ranks would be refused by the old
// peer service).
//
// Reports (one per step, events, the outcome) go out in order from a ReportQueue
// (report_queue.h), the steps waiting in runs of up to kMaxStepRun per call (StepRun), so a
// worker catches up after an outage in a few calls and a fast job's every step is recorded. A
// coordinator that answers a run with INVALID_ARGUMENT or INTERNAL (one before StepRun, or a
// run it cannot take) is sent those steps one by one, so a single bad step is dropped alone;
// the steps after them go in a run again. While the coordinator cannot be reached reports are kept:
// up to `max_buffered_reports`, the steps thinned evenly beyond that (with a log line), the outcome
// until delivered, however long the coordinator cannot take it.
// Every string of a report is valid UTF-8 (ReportQueue). An INTERNAL answer is never a refusal:
// the report is kept and retried like an outage; answered INTERNAL 3 times, an outcome is sent
// again with its error text in ASCII (once), any other report is dropped with a log line.
// An answer that is neither a refusal nor a bad report (INVALID_ARGUMENT, OUT_OF_RANGE: dropped
// with a log line) keeps the report for later, as an outage: DATA_LOSS, PERMISSION_DENIED...
// A report the coordinator refuses (NOT_FOUND / FAILED_PRECONDITION) makes the worker register
// again (its session may be unknown after a restart). Refused in 3 registrations in a row with
// no report accepted in between, the job is no longer this worker's: it is stopped and its
// reports dropped. (The coordinator normally says so itself, with cancel_job_ids.)
//
// Cancellation (HeartbeatResponse.cancel_job_ids, ReportProgressResponse.cancelled) stops the
// job's step in progress at its next transformer block (a rank of a multi-worker job: at once,
// its transport shut down); no outcome is sent for
// it (the coordinator already decided).
// Stop() (SIGTERM) first deregisters (DeregisterWorker with the reason and the running job and
// step, within `deregister_timeout`), so that the coordinator hears the cause from this worker
// before its peers' stream errors, then stops the job the same way (FAILURE_STOPPED, "<reason>
// after step N"), waits up to `shutdown_grace` for the reports to be delivered, and makes Run()
// return OK. Once deregistered it never registers or heartbeats again (reports it still sends;
// refused ones are dropped). A deregistration that fails (coordinator unreachable) leaves the
// daemon as before: it registers again if need be to deliver the outcome, which says why.
//
// Directories of deleted jobs (HeartbeatResponse.remove_dirs, `dtrain delete JOB --files`) are
// removed one at a time by a third thread (asked_work.h; job_dir_removal.h says which
// directories it removes and which it refuses), so that removing gigabytes never delays a
// heartbeat. Each outcome is one log line, and its JobDirRemoved goes in every heartbeat until
// one returns OK (HeartbeatRequest.dirs_removed), the first at once. A removal asked again while
// it is queued, running or its answer undelivered (the coordinator sends it again every few
// heartbeats) is not run twice; asked again after its answer was delivered, it is answered again
// (DIR_ABSENT). Stop() drops the removals not started; the one running finishes (the destructor
// waits for it).
//
// Samples of a job's model (HeartbeatResponse.samples, `dtrain sample JOB`) are drawn one at a
// time by a fourth thread (sample_drawer.h: on the CPU, from paths inside the allowed roots
// only); each answer goes in every heartbeat until one returns OK (HeartbeatRequest.samples_drawn),
// and the worker heartbeats as soon as one is ready. Stop() ends the one being drawn.
//
// Job-related warnings (the stop notice, reports the coordinator refuses, reports dropped from
// a full buffer) go to stderr and, as LogLine reports of the job, to the coordinator (dtrain
// logs). A failure is not sent as a line: the coordinator records the outcome's error itself.
#ifndef DTRAIN_WORKER_DAEMON_WORKER_DAEMON_H_
#define DTRAIN_WORKER_DAEMON_WORKER_DAEMON_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_limits.h"
#include "common/tls.h"
#include "kernels/backend.h"
#include "proto/coordinator.pb.h"
#include "worker/daemon/asked_work.h"
#include "worker/daemon/coordinator_client.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/report_queue.h"
#include "worker/daemon/sample_drawer.h"

namespace dtrain::worker {

struct WorkerOptions {
  std::string worker_id;  // required
  // This process's session id (empty: a random one) and the dead session of this worker's
  // previous process on this host (session_lock.h), sent at registration.
  std::string session_id;
  std::string previous_session_id;
  // The run record (common/run_record.h) this process keeps while a job runs ("" : none), and
  // what its dead predecessor's record said (sent at the first registration).
  std::string run_record;
  std::optional<PreviousRun> previous_run;
  std::string advertise_address;  // host:port of the peer service, as peers reach it
  std::string host_label;
  std::string data_root = "./dtrain-data";
  // Given to every job: see JobRunnerOptions.
  std::vector<std::string> allowed_roots;
  // Declared at registration (common/path_policy.h DeclaredRoots); empty: allowed_roots.
  std::vector<std::string> declared_roots;
  // Multi-worker jobs: see JobRunnerOptions.
  std::string peer_listen_address;
  absl::Duration connect_timeout = absl::Seconds(60);
  absl::Duration comm_timeout = absl::Seconds(60);
  bool shared_memory = true;  // see JobRunnerOptions
  int data_connections = -1;  // see JobRunnerOptions
  int data_port = 0;          // see JobRunnerOptions
  TlsFiles peer_tls = TlsFiles::Insecure();
  // How long the first registration retries while the coordinator says another live session
  // holds this worker id (ALREADY_EXISTS) before Run gives up: long enough for the lease of a
  // previous process of this worker that died to run out; a second live process with the same
  // --worker_id (a configuration error) never lets go.
  absl::Duration id_conflict_wait = absl::Seconds(15);
  int log_every = 10;  // log a progress line every N steps (0: never)
  int64_t max_buffered_reports = 10000;
  absl::Duration max_backoff = absl::Seconds(2);
  absl::Duration shutdown_grace = absl::Seconds(10);
  absl::Duration deregister_timeout = absl::Seconds(2);
  std::function<void(int64_t step)> after_step;  // test seam, see JobRunnerOptions
  parallel::TestOnlyFaults test_only;            // see JobRunnerOptions
  // Test-only: keep a finished job (a multi-worker rank's peer service up) this long after its
  // last report is delivered before leaving it: the window in which another job's ranks could
  // meet the old peer service, held open. 0: leave at once.
  absl::Duration test_only_linger_after_job = absl::ZeroDuration();
  WorkerMetrics* metrics = nullptr;  // see JobRunnerOptions
  // Memory (common/host_memory.h). memory_bytes: what this worker offers the coordinator
  // (--memory, else the smaller of its cgroup limit and the host's memory; 0: the device's own
  // figure); host_id and host_memory_bytes: sent at registration so the coordinator divides a
  // host's memory among its workers (RegisterWorkerRequest).
  int64_t memory_bytes = 0;
  std::string host_id;
  int64_t host_memory_bytes = 0;
  // The memory watch: while a job runs, resident_bytes() is read every memory_check_interval;
  // above memory_bytes the job's rank fails with "out of memory budget: ..." (JobRunner::Fail)
  // rather than be killed by the kernel. Null (or memory_bytes 0): no watch.
  std::function<absl::StatusOr<int64_t>()> resident_bytes;
  absl::Duration memory_check_interval = absl::Milliseconds(200);
  // Called when a registration fails as unreachable (UNAVAILABLE, DEADLINE_EXCEEDED) while no
  // job runs: one line saying why the coordinator refused this worker at the TLS handshake
  // (common/tls_probe.h: "the coordinator refused our certificate ...: it expired on ..."),
  // "" when that is not the cause. A refusal is permanent: Run returns it as
  // FAILED_PRECONDITION (exit 1) instead of retrying. Null: never asked.
  std::function<std::string()> explain_refusal;
  // How the samples the coordinator asks for are drawn (sample_drawer.h); the deadline is
  // each ask's.
  SampleSetup sample_setup{.device = "cpu"};
};

// A random session id (16 hex digits): one per worker process.
std::string NewSessionId();

class WorkerDaemon {
 public:
  // `client` and `backend` must outlive the daemon; `backend` is the worker's one device.
  WorkerDaemon(WorkerOptions options, CoordinatorClient* client, kernels::Backend* backend);
  ~WorkerDaemon();  // stops and joins a running job and a running directory removal

  // Runs until Stop(). OK after a clean stop; InvalidArgument when the coordinator rejects the
  // first registration as malformed (e.g. an empty worker id); AlreadyExists when another live
  // session holds the worker id for longer than id_conflict_wait; FailedPrecondition when the
  // coordinator refuses its certificate (WorkerOptions.explain_refusal). Call once.
  absl::Status Run();

  // Thread-safe; `reason` ("worker stopped by SIGTERM") is sent with the deregistration and
  // becomes the running job's error. Blocks up to deregister_timeout (not holding the lock).
  void Stop(const std::string& reason);

  const std::string& session_id() const { return session_id_; }

 private:
  struct ActiveJob {
    std::string id;
    int attempt = 0;  // JobAssignment.attempt: every report of this run carries it
    int64_t total_steps = 0;
    std::unique_ptr<JobRunner> runner;
    std::thread thread;
    // Guarded by WorkerDaemon::mu_:
    bool finished = false;
    bool cancelled_by_coordinator = false;             // or disowned: no outcome is sent
    absl::Time linger_until = absl::InfiniteFuture();  // test_only_linger_after_job
    // Refused reports since the last accepted one, counted once per registration epoch.
    int refusals = 0;
    int64_t refused_in_epoch = -1;
  };
  absl::Status Register();
  absl::Status Heartbeat(bool* started_job);
  void SendReports(absl::Time until);
  // Joins a finished job whose reports are all delivered and destroys it (its transport and
  // peer service with it); true when it did.
  bool ReapJob();
  void RunJob(ActiveJob* job);
  // DeregisterWorker with the stop reason and the running job; on success the daemon leaves
  // for good (see the top). Not under mu_: up to deregister_timeout.
  void Deregister();
  // Queues a report of `job` (the training thread's events, location, checkpoints), unless the
  // coordinator has ended the job.
  void Report(ActiveJob* job, ReportProgressRequest request);

  void StartJobLocked(const JobAssignment& assignment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelByCoordinatorLocked(const std::string& job_id, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The report queue's Push, Warn and DropJob, waking the control thread.
  void EnqueueLocked(ReportProgressRequest request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EnqueueLocked of a report of `job`'s run: every such report carries its job id and attempt.
  void EnqueueOfLocked(const ActiveJob& job, ReportProgressRequest request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WarnLocked(const std::string& job_id, const std::string& text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropReportsLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CanExitLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WaitFor(absl::Duration d, bool wake_on_reports);
  // The memory watch thread (WorkerOptions.resident_bytes): returns once Run returns.
  void WatchMemory();
  // What the removal thread does with one: the directory resolved when the job ended before
  // its rank 0 reported it, removed when the rules allow (job_dir_removal.h), one log line.
  JobDirRemoved RemoveDir(JobDirRemoval removal) const;
  // A SampleDrawer's or the removals' answer is ready: heartbeat now.
  void HeartbeatSoon();

  const WorkerOptions options_;
  CoordinatorClient* const client_;
  kernels::Backend* const backend_;
  const std::string session_id_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool run_returned_ ABSL_GUARDED_BY(mu_) = false;  // ends WatchMemory
  // From Stop() on (unless deregistering fails): no registration or heartbeat.
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
  bool deregistered_ ABSL_GUARDED_BY(mu_) = false;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
  absl::Time drain_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool wake_ ABSL_GUARDED_BY(mu_) = false;  // reports queued, job finished, or stop
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  // options_.previous_run until a registration delivered it.
  std::optional<PreviousRun> previous_run_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // successful registrations so far
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  absl::Time reports_retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The reports up to this one go one at a time (a run of them was refused); unset: steps go
  // in runs of up to kMaxStepRun.
  std::optional<uint64_t> singles_through_ ABSL_GUARDED_BY(mu_);
  // INTERNAL answers in a row to the report numbered internal_seq_ (SendReports).
  uint64_t internal_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int internal_answers_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<ActiveJob> job_ ABSL_GUARDED_BY(mu_);
  ReportQueue reports_ ABSL_GUARDED_BY(mu_);
  // An answer of removals_ or samples_ is ready: heartbeat now rather than at the interval.
  bool heartbeat_now_ ABSL_GUARDED_BY(mu_) = false;
  // Last, so destroyed first (their threads call back into mu_): directory removals (see the
  // top; by job id) and samples.
  AskedWork<JobDirRemoval, JobDirRemoved> removals_;
  SampleDrawer samples_;
};

// One stderr line: "2026-01-02 03:04:05.678 dtrain-worker[w1]: message".
void LogLine(const std::string& worker_id, const std::string& message);

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_WORKER_DAEMON_H_
