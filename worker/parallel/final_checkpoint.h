// The last step's checkpoint of a multi-worker run, when a disk could not hold it.
//
// A multi-worker job's weights are exported from the shards of its last step
// (checkpoint_export.h), so a last step skipped for want of space would fail the job at its
// end and lose every step since its last sealed checkpoint. Instead every rank keeps its state
// in memory and the step is written again, after 2 s, then 4, 8, 16 and every 30 s, until it
// seals or `wait` has passed; the job's log says so at the first try and every 5 minutes, and
// the CheckpointSkipped alert (deploy/prometheus/alerts.yml) has fired for the skip. Freeing
// space ends the wait at the next try; meanwhile the job's status names the wait (rank 0's
// CheckpointWait report, proto/coordinator.proto). Rank 0 alone knows whether the step sealed
// (it gathers every rank's part), so each round starts with the ranks agreeing on its verdict.
#ifndef DTRAIN_WORKER_PARALLEL_FINAL_CHECKPOINT_H_
#define DTRAIN_WORKER_PARALLEL_FINAL_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dtrain::parallel {

struct FinalCheckpointRetry {
  absl::Duration wait = absl::Hours(1);  // then rank 0 fails the job as before, saying so
  absl::Duration first_delay = absl::Seconds(2);
  absl::Duration max_delay = absl::Seconds(30);
  absl::Duration log_every = absl::Minutes(5);
};

// Rank 0's account of the wait, for the coordinator (a job's status names it): sent when the
// wait starts, when what does not fit changes, with each log line (every log_every: a
// coordinator that restarted learns of it), and once more with `ended` when it is over
// (written, given up, or stopped).
struct SpaceWait {
  std::string dir;   // where it does not fit
  std::string why;   // what did not fit, as the write said it
  absl::Time until;  // when the wait gives up
  bool ended = false;
  bool weights_file = false;  // a file written from memory (WriteWaitingForSpace)
};

struct FinalCheckpointHooks {
  // Every rank, with the same rounds: the sum over the ranks of `value` (a world all-reduce).
  std::function<absl::StatusOr<float>(float value)> agree;
  // Polled while waiting (every 200 ms): non-OK when a peer failed or this rank is being stopped
  // (a cancelled job): the wait ends with that error.
  std::function<absl::Status()> peers_ok;
  // Writes the last step again and waits for it; returns why it was skipped again ("" when it
  // sealed: rank 0 then reports it). Rank 0's answer is the verdict.
  std::function<absl::StatusOr<std::string>()> write_again;
  // Called with true before each wait between tries and false after it (when set): the
  // flight recorder shows the wait, so that `dtrain diagnose` says what the ranks do.
  std::function<void(bool waiting)> waiting;
  // One process alone writes it from memory (WriteWaitingForSpace sets it): the log lines say
  // so instead of "every rank keeps its state".
  bool alone = false;
  // Rank 0, when set: the wait as a SpaceWait.
  std::function<void(const SpaceWait&)> space_wait;
  // Rank 0: lines for the job's log (the wait; its end).
  std::function<void(const std::string&)> warning;
  std::function<void(const std::string&)> note;
};

// Called by every rank after the run's last checkpoint was waited for; `skipped` is why rank 0
// skipped it ("" when it sealed; other ranks pass ""). Returns OK with *skipped "" once the
// step sealed, OK with *skipped set when the wait ran out (rank 0 then fails the job), or the
// error that ended the wait. `what` ("the checkpoint of step 20, the last") and `dir` name
// them in the log. One worker's run uses it for its weights' file the same way.
absl::Status AwaitFinalCheckpoint(const FinalCheckpointRetry& retry,
                                  const FinalCheckpointHooks& hooks, bool rank0,
                                  const std::string& what, const std::string& dir,
                                  std::string* skipped);

// A file one process writes from memory when its disk cannot hold it: a one-worker run's
// weights, or rank 0's export of a multi-worker run's last step after its peers left. The same
// wait, with this process alone. `write` returns "" once written and why not when the disk is
// full (any other error ends the wait with it); `stopped` ends it (a cancelled job). `hooks`
// give the log lines and space_wait (SpaceWait.weights_file set); agree, peers_ok and
// write_again are set here. OK once written; ResourceExhausted naming why when the wait ran out.
absl::Status WriteWaitingForSpace(const FinalCheckpointRetry& retry, FinalCheckpointHooks hooks,
                                  const std::string& path, const std::string& what,
                                  const std::function<absl::StatusOr<std::string>()>& write,
                                  const std::function<bool()>& stopped);

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_FINAL_CHECKPOINT_H_
