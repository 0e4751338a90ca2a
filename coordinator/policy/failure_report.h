// Failure attribution: which worker of a failed job to name first.
//
// When one rank of a multi-rank job stops, its peers fail too, each with a transport error
// about the peer it was waiting on ("receiving collective group=16777217 seq=641 ... stream
// broke"), and their reports often reach the coordinator before the real cause does (or the
// real cause never reports: kill -9, SIGSTOP). The job manager collects every rank's failure for
// a short window (or until every rank has reported) and then names, in this order:
//   1. a worker that was stopped (SIGTERM/SIGINT, DeregisterWorker): a planned shutdown;
//   2. a worker whose lease expired (lost);
//   3. a rank that failed on its own (bad data, device, disk: FAILURE_LOCAL);
//   4. a worker its peers blame (JobOutcome.suspect_workers) that reported nothing itself:
//      killed or hung, with how long its heartbeats have been silent;
//   5. when every failure is a peer's and every blame is returned (w1 blames w2, w2 blames w1:
//      both alive, each lost the other), the link: no worker is named (RootCause.worker_id
//      empty), so none is excluded from the job for a partition;
//   6. otherwise the first report.
// The reason is the root cause on its first line and the first other rank's transport detail
// on a second line, so people read the cause and scripts still find the detail:
//   worker w4 (dp0 pp1 tp1) stopped: worker stopped by SIGTERM after step 20
//     then worker w3 (dp0 pp1 tp0) failed: receiving collective group=... stream broke
#ifndef DTRAIN_COORDINATOR_POLICY_FAILURE_REPORT_H_
#define DTRAIN_COORDINATOR_POLICY_FAILURE_REPORT_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

// One rank's failure as the coordinator heard it, in arrival order.
struct RankFailure {
  enum Cause {     // ordered: a lower cause is named first
    kStopped = 0,  // the worker was stopped on purpose
    kLost = 1,     // its lease expired
    kLocal = 2,    // it failed on its own
    kPeer = 3,     // it failed because of a peer (suspects)
  };
  Cause cause = kLocal;
  int rank = -1;  // index in the placement; -1 when the worker holds no rank
  std::string worker_id;
  std::string error;                  // the worker's words (or the coordinator's, for kLost)
  std::vector<std::string> suspects;  // kPeer: the workers it blames
  int error_code = 0;  // kLocal: the absl::StatusCode the worker reported (0: unknown)
  absl::Duration silent = absl::ZeroDuration();  // kLost: its heartbeats' silence
};

// Whether restarting the job can cure `failure` (the one rule of FaultTolerance): a worker
// stopped, lost or blamed by its peers, or a rank's own transient error (unavailable, deadline
// exceeded, aborted, cancelled) can; bad input (invalid argument, not found, failed
// precondition: a missing dataset, an invalid spec, a foreign job directory) and everything
// else a rank reports on its own cannot, and fails the job at once.
bool RestartCanCure(const RankFailure& failure);

// Whether `failure` is a rank that gave up waiting on a peer: a FAILURE_PEER report with
// DEADLINE_EXCEEDED (its communication timeout), as opposed to a connection the peer lost. The
// one test for "timed out" (the root-cause wording, the diagnosis a timeout starts).
bool IsCommTimeout(const RankFailure& failure);

// The root cause of a job's failures (the order above): the reason as RootCauseReason words
// it, the worker it names ("" when none), and whether a restart can cure it.
struct RootCause {
  std::string reason;
  std::string worker_id;
  bool curable = false;
};
RootCause FindRootCause(const Placement& placement, const std::vector<RankFailure>& failures,
                        const absl::flat_hash_map<std::string, absl::Duration>& heartbeat_age);

// The cause of a JobOutcome's kind.
RankFailure::Cause CauseOf(FailureKind kind);

// The FAILED reason for `failures` (non-empty) of a job placed as `placement`. heartbeat_age:
// time since each worker's last heartbeat (for silent suspects; missing: unknown).
std::string RootCauseReason(const Placement& placement, const std::vector<RankFailure>& failures,
                            const absl::flat_hash_map<std::string, absl::Duration>& heartbeat_age);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_POLICY_FAILURE_REPORT_H_
