// Which run of a job writes its directory now. A run that was frozen (SIGSTOP, a paused VM, a
// worker cut off past its lease) can wake after its job was recovered on other workers and go
// on where it stopped: seal the step it was writing, move `latest`, prune, remove a step it
// skipped. The run that replaced it owns the directory by then. So every run's rank 0 claims
// the job directory when the run starts, before anything is written:
//
//   DIR/run        "attempt 2 run 5f0c3a1b9e2d\n": JobAssignment.attempt and the run's token
//
// and every rank checks the claim before it writes a step, rank 0 again before it seals,
// removes or prunes one: a run whose claim was replaced stops writing (Aborted naming both
// runs) and leaves the directory as the newer run keeps it.
//
//   RETURN_IF_ERROR(ClaimRun(job_dir, {attempt, token}));     // rank 0, at the start of a run
//   RETURN_IF_ERROR(CheckRunClaim(job_dir, {attempt, token}));  // before each write
//
// Attempts order the claims: a run never takes the directory from a later attempt (a run
// frozen before its claim, woken after its replacement claimed, is refused), and takes it from
// an earlier one or from another run of its own attempt (a recovery placed again). The window
// left is the microseconds between a check and the rename that follows it.
#ifndef DTRAIN_WORKER_MODEL_RUN_CLAIM_H_
#define DTRAIN_WORKER_MODEL_RUN_CLAIM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "worker/model/held_directory.h"

namespace dtrain::model {

inline constexpr char kRunClaimFileName[] = "run";

struct RunClaim {
  // The run's number within its job (JobAssignment.attempt): 0 its first run, N the run after
  // its N-th recovery.
  int64_t attempt = 0;
  // The run's token (CheckpointWriterOptions.run_token): every rank's, new for each run. Printable,
  // without spaces.
  std::string token;
};

// The claim's one line, "attempt 2 run 5f0c3a1b9e2d".
std::string RunClaimText(const RunClaim& run);

// Writes DIR/run (atomically) for `run`. Aborted when a later attempt's claim is there ("job
// directory DIR is written by a later run (attempt 3, run ...) than this one (attempt 2, run
// ...): this run was replaced"); a claim that cannot be read as one is replaced.
absl::Status ClaimRun(const HeldDirectory& dir, const RunClaim& run);

// OK while DIR/run names `run`; Aborted naming the run that holds the claim (or saying that none
// does) otherwise.
absl::Status CheckRunClaim(const HeldDirectory& dir, const RunClaim& run);

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_RUN_CLAIM_H_
