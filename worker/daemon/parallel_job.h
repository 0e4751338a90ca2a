// ParallelJob: this worker's rank of a multi-worker job (dp * pp * tp > 1), as JobRunner runs
// it: a comm::GrpcTransport for the job, streams to every peer, and a
// parallel::ParallelTrainer over them.
//
//   ASSIGN_OR_RETURN(int rank, FindRank(assignment, worker_id));
//   ASSIGN_OR_RETURN(parallel::ParallelTrainingOptions o,
//                    ParallelPlan(assignment, rank, run, comm_timeout));
//   ParallelJob job(assignment, rank, {listen_address, connect_timeout});
//   RETURN_IF_ERROR(job.Connect());           // every peer answered, or the deadline passed
//   absl::Status s = job.Train(backend, o, on_started, callbacks);
//   std::vector<int> suspects = job.SuspectPeers(s);  // before Close
//   job.Close(s.ok() ? absl::Seconds(5) : absl::ZeroDuration());
//
// Addresses: rank r listens on its own RankAssignment.worker_address (the address its worker
// registered with: --advertise_address), on every interface unless --peer_listen says
// otherwise, and reaches its peers (plan/ranks.h PeerRanks: at most 8, whatever the job's size)
// at the addresses its assignment lists; it knows no other rank's address and needs none. The
// transport lives for the job only (HELLOs carry the job id and the run's Placement.peer_secret; a
// worker runs one job at a time, and accepts streams only from workers of the same run).
//
// Connecting: only to its peers (PeerRanks). They get their assignments in their own
// heartbeats, so they start up to a heartbeat interval apart (more after a coordinator restart).
// Connect waits for each peer's peer service to accept connections, polling every 100 ms (so Abort
// is honoured at once), and to serve this run: a worker may still serve its previous job's peer
// service on the same address for a moment after that job ended (until its outcome is delivered),
// which refuses this run's secret; Connect asks (a clock-only Diagnose with this run's job id and
// secret) and waits while the answer is a refusal. Then it opens the job's stream to the peer; all
// within `connect_timeout`. A peer that never comes, or still serves another run at the
// deadline, is Unavailable naming its rank, worker and address (a FAILURE_PEER blaming it,
// which a restart can cure).
//
// Diagnosis: the rank keeps a flight recorder (worker/comm/flight_recorder.h) of its sends,
// receives, collectives, F / B / W and checkpoint phases, which its peer service answers to
// the coordinator's Diagnose (`dtrain diagnose`) for the job's run.
//
// Failures: the transport is built with every rank's DescribeRank name, so the errors Train and
// Connect return name peers by worker where they are made ("rank 3 (worker w4 at
// 127.0.0.1:7074, dp1 pp0 tp1)"), and the coordinator's FAILED reason says which worker
// vanished.
//
// Blame: SuspectPeers(s) says which peers an error of Connect or Train is owed to, for the
// outcome's FAILURE_PEER kind: only for errors of waiting on peers (Unavailable: a stream broke
// or a peer never came; DeadlineExceeded: nothing arrived in time; Aborted: a peer gave up), the
// peers whose streams failed or that sent the job's abort (Transport::PeerStatus), and the
// peers the error itself names (a peer that hangs keeps its stream). Any other error is this
// rank's own, even when its peers gave up meanwhile (they all fail on a bad batch at once).
//
// Abort (cancel, SIGTERM) shuts the transport down at once, from any thread, without waiting:
// a rank blocked on a peer returns Cancelled instead of waiting for its deadline, and its peers
// see it gone. After a failure JobRunner keeps the transport up until the failure is reported
// (the JobRunner is destroyed): a rank that failed because a peer vanished must not look, to
// its other peers, like the cause of the failure before its report names the real one.
#ifndef DTRAIN_WORKER_DAEMON_PARALLEL_JOB_H_
#define DTRAIN_WORKER_DAEMON_PARALLEL_JOB_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "kernels/backend.h"
#include "plan/ranks.h"  // WorkersNeeded, RankIndex, ReportingRank, DescribeRank
#include "proto/coordinator.pb.h"
#include "proto/plan.pb.h"
#include "worker/comm/grpc/shm_link.h"  // DataPathEvent
#include "worker/comm/observed_transport.h"
#include "worker/parallel/parallel_trainer.h"
#include "worker/training_run.h"

namespace dtrain::comm {
class GrpcTransport;
}  // namespace dtrain::comm

namespace dtrain::worker {

// Checks the placement of a multi-worker assignment and returns this worker's rank index. The
// coordinator sends a rank its own part of the job (coordinator/rank_assignment.h): entries in
// rank order, each with its coordinates, a worker id and an address, one of them this worker's,
// and among them every rank it talks to (plan/ranks.h PeerRanks); a whole placement (dp*pp*tp
// entries) is accepted too. FailedPrecondition naming what is wrong (an entry out of order or
// outside the layout, no worker or address, two entries with one address, no entry or two for
// this worker, a peer missing).
absl::StatusOr<int> FindRank(const JobAssignment& assignment, const std::string& worker_id);

// The assignment's placement indexed by rank: dp*pp*tp entries, those the assignment lists as
// they are, every other with its coordinates only (no worker, no address: a rank this one never
// talks to). Call on an assignment FindRank accepted.
Placement PlacementByRank(const JobAssignment& assignment);

// The options of rank `rank` of `assignment`: the run (TrainingRunOf the planned spec: model,
// optimizer, data, seed, steps, the whole batch, checkpoint dir and interval, save path) and
// the rank's part of the coordinator's plan (JobAssignment.rank_plan: layout, schedule,
// micro-batches, its chunks) as they are; nothing is planned, defaulted or checked again here.
// FailedPrecondition when the rank plan was made for another rank than the placement gives
// this worker.
absl::StatusOr<parallel::ParallelTrainingOptions> ParallelPlan(const JobAssignment& assignment,
                                                               int rank, TrainingRun run,
                                                               absl::Duration comm_timeout);

struct ParallelJobOptions {
  // Where this rank's peer service listens; empty: every interface, on the port of its
  // placement address ("[::]:7071").
  std::string listen_address;
  absl::Duration connect_timeout = absl::Seconds(60);
  // How often Connect checks whether a peer accepts connections (and whether it was aborted).
  absl::Duration connect_poll = absl::Milliseconds(100);
  // Told the payload bytes of every message to and from each peer (the worker's metrics);
  // null: none. Must outlive the job.
  comm::TransportObserver* observer = nullptr;
  // Told every peer stream this rank's peer service refuses (GrpcTransportOptions::on_refused:
  // e.g. a HELLO without the run's Placement.peer_secret), on a gRPC thread; may be empty.
  std::function<void(const absl::Status&)> on_refused;
  // Told the data path set up with each peer (GrpcTransportOptions::on_data_path: shared
  // memory on one host, else the stream, and why); on a gRPC or the connecting thread; may be
  // empty; must not block.
  std::function<void(const comm::DataPathEvent&)> on_data_path;
  // Peers on this host through shared memory (GrpcTransportOptions::shared_memory).
  bool shared_memory = true;
  // TLS data connections to peers on other hosts (GrpcTransportOptions::data_connections).
  int data_connections = -1;
  // Their listener's port (GrpcTransportOptions::data_port); 0: the kernel's choice.
  int data_port = 0;
  // Mutual TLS of the peer service and channels (GrpcTransportOptions::tls).
  TlsFiles tls = TlsFiles::Insecure();
};

class ParallelJob {
 public:
  ParallelJob(const JobAssignment& assignment, int rank, ParallelJobOptions options);
  ~ParallelJob();  // Close(zero), joins the abort thread

  // Starts this rank's transport and opens a stream to every other rank (see the top).
  // Cancelled after Abort().
  absl::Status Connect();

  // Creates the trainer, calls `on_started(start_step, resumed_from)` once it has loaded (see
  // ParallelTrainer::start_step / resumed_from; may be empty), and runs it to the end
  // (ParallelTrainer::Run), reporting through `callbacks`. Errors name peers (see the top).
  // Call after Connect succeeded.
  // After an error the trainer is kept until the destructor has closed the transport (its
  // threads may be waiting on peers).
  absl::Status Train(
      kernels::Backend* backend, parallel::ParallelTrainingOptions options,
      const std::function<void(int64_t start_step, const std::string& resumed_from)>& on_started,
      const TrainingCallbacks& callbacks);

  // Thread-safe, idempotent, returns at once: shuts the transport down on a thread of its own.
  void Abort();
  bool aborted() const;

  // Closes the transport: queued frames get up to `grace` (zero: abrupt). Idempotent.
  void Close(absl::Duration grace);

  // The ranks `s` (an error of Connect or Train) is owed to, ascending; empty when it is this
  // rank's own failure (see the top). Call before Close.
  std::vector<int> SuspectPeers(const absl::Status& s) const;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The ranks Connect connects to (plan/ranks.h PeerRanks), ascending.
  const std::vector<int>& peers() const { return peers_; }
  // The worker of rank `rank`; empty for a rank this one was not told about (not a peer).
  const std::string& WorkerOf(int rank) const { return placement_.ranks(rank).worker_id(); }

 private:
  std::shared_ptr<comm::GrpcTransport> transport() const;
  // Waits until `peer`'s address accepts connections, polling (and checking Abort); then the
  // transport's Connect for it.
  absl::Status ConnectTo(int peer, absl::Time deadline);

  const std::string job_id_;
  const Placement placement_;
  const int rank_;
  const int size_;
  const std::vector<int> peers_;
  const ParallelJobOptions options_;
  // What this rank did last (always on): the transport's peer service answers it to
  // `dtrain diagnose`, and the trainer records into it through observed_. Declared before
  // the transport, which reads it until it is gone.
  comm::FlightRecorder recorder_;

  mutable absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<comm::GrpcTransport> transport_ ABSL_GUARDED_BY(mu_);
  std::thread abort_thread_ ABSL_GUARDED_BY(mu_);
  // The transport as the trainer sees it: bytes counted for the observer, operations recorded.
  std::unique_ptr<comm::ObservedTransport> observed_;
  // The trainer, destroyed before the transport (it sends and receives through it).
  std::unique_ptr<parallel::ParallelTrainer> trainer_;
};

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_PARALLEL_JOB_H_
