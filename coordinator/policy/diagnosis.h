// The analysis behind `dtrain diagnose JOB`: from what every rank's flight recorder says (or that
// a rank did not answer), who waits on whom, where the waits end, and what is wrong.
//
// Input: a JobDiagnosis whose ranks have their identity (rank, worker_id, address, label),
// answered / error / heartbeat_age_seconds and, when answered, the recorder (proto/peer.proto
// RankDiagnosis: entries oldest first, the rank's clock now). A pure function: no clock, no
// I/O; ages are computed on each rank's own clock (now_unix_ns - start_unix_ns), so clock
// offsets between hosts do not matter.
//
// Per answered rank (its newest open entries): waiting in a receive (on the peer it receives
// from), in a collective, in F / B / W without a receive open (compute), in a checkpoint phase,
// or between operations. A wait counts once it is older than `wait_threshold`.
//
// Findings, in this order:
//   - a rank that did not answer (a rank that timed out, TimedOutRank, is no finding: it waits
//     on the ranks it blamed): "rank 5 on w6 (dp0 pp1 tp1) did not answer in 2 s: process
//     alive? last heartbeat 0.4 s ago";
//   - a collective whose waiting ranks disagree on the sequence number, naming the ranks on
//     each side;
//   - a receive waiting for a message its sender (itself not waiting) never sent, or sent
//     without it arriving;
//   - ranks that wait on each other in a cycle;
//   - each root (the rank a chain of waits ends on) with who waits on it: "root: rank 5 (w6,
//     dp0 pp1 tp1) is in F of micro-batch 7, step 120, for 42.0 s (compute, not
//     communication); rank 6 waits on its activation; ranks 1-4 wait on those".
// The summary is the root with the most waiters, else the first finding, else "healthy: no rank
// waiting longer than 1.0 s".
//
//   JobDiagnosis d = Analyse(std::move(gathered), {.wait_threshold = absl::Seconds(1)});
#ifndef DTRAIN_COORDINATOR_POLICY_DIAGNOSIS_H_
#define DTRAIN_COORDINATOR_POLICY_DIAGNOSIS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

// A rank whose run already failed because it timed out waiting on peers (its report reached the
// coordinator first; its peer service may be gone, and its recorder no longer shows the wait):
// the analysis counts it as waiting on the ranks it blamed, in place of its answer.
struct TimedOutRank {
  int rank = -1;
  std::vector<int> on;  // the ranks it blamed (its report's suspect workers)
  std::string error;    // its report
};

struct DiagnosisOptions {
  // A wait shorter than this is normal traffic (a healthy pipeline waits milliseconds).
  absl::Duration wait_threshold = absl::Seconds(1);
  // How long a rank had to answer (named in the finding of a rank that did not).
  absl::Duration deadline = absl::Seconds(2);
  // Entries of each rank's recorder kept in the answer (the newest); the analysis reads all.
  int keep_entries = 64;
  // Ranks that timed out (the diagnosis the coordinator runs when one does): in the summary as
  // "rank 0 timed out waiting on it", never as not answering.
  std::vector<TimedOutRank> timed_out;
};

JobDiagnosis Analyse(JobDiagnosis gathered, const DiagnosisOptions& options = {});

// "rank 5", "ranks 1-4, 6".
std::string RankList(std::vector<int> ranks);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_POLICY_DIAGNOSIS_H_
