// CheckpointWriter: one rank's background writer of checkpoint steps, so that training goes on
// while a step's files reach the disk (docs/PERFORMANCE.md, "Background checkpoints").
//
// The writer opens the job's directory once, when it is made, and holds it
// (model::HeldDirectory): every later step is written there, relative to that descriptor and
// never through a symlink, even if the directory is renamed or replaced meanwhile.
//
// At a checkpoint step the trainer snapshots its state into host memory (SnapshotShard,
// sharded_checkpoint.h: each file's complete bytes and manifest entry) and hands the files to
// Submit; training continues at once. On a thread of its own the writer then
//   1. writes each file as DIR/step_N/<name> (temp file, fsync, rename, fsync the directory:
//      common/files.h), checksumming the bytes it writes (XXH3, manifest.h ShardChecksum: no
//      rank, rank 0 included, ever reads a shard back),
//   2. publishes this rank's entries, durably: DIR/step_N/rank-00003.entries.json
//      (dtrain.CheckpointRankEntries, with the run token),
//   3. on rank 0 only: waits, at most options.seal_timeout (and no longer than every other rank
//      is alive: options.peers_failed), until every rank of the run has
//      published its entries of step N, then seals the step with all of them (options.seal:
//      SealStep writes manifest.json, then moves `latest`), then deletes the sealed steps
//      beyond options.keep_last (model::PruneSealedSteps).
// A step that would not fit is skipped, not failed: before writing, the file system's free
// space (fstatvfs) is compared with the rank's bytes of the step; a rank whose part does not
// fit, or meets ENOSPC while it is written, skips it and training goes on. One writer removes
// the step whole. With several, the rank publishes entries that say it skips (a few hundred
// bytes: CheckpointRankEntries.skipped) in place of its file list, and rank 0, once every rank
// has published, removes the step whole instead of sealing it when any rank skipped: every
// rank skips the same steps, and no partial step is left behind. Each reports the step as
// CheckpointWritten::skipped (rank 0 with every skipping rank's reason).
// At most one step is in flight: Submit first waits for the previous one (that wait is
// reported as part of CheckpointWritten::blocked_seconds). A step that fails to write or seal
// is an error naming the step, the rank and the file; it never touches an earlier sealed step
// or `latest`, which move only in step 3.
//
//   CheckpointWriter writer({.dir = dir, .rank = r, .world_size = n, .run_token = token,
//                            .seal = seal_step});
//   RETURN_IF_ERROR(writer.Submit(step, std::move(files), snapshot_seconds));  // training goes on
//   ASSIGN_OR_RETURN(auto done, writer.TakeFinished());  // at each step boundary: report them
//   ASSIGN_OR_RETURN(auto last, writer.Finish());        // at the end of the run
//
// The methods are for one (the training) thread; the writer's own thread touches only the step
// it was handed.
#ifndef DTRAIN_WORKER_PARALLEL_CHECKPOINT_WRITER_H_
#define DTRAIN_WORKER_PARALLEL_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/checkpoint.pb.h"
#include "worker/model/held_directory.h"
#include "worker/model/run_claim.h"
#include "worker/parallel/manifest.h"
#include "worker/training_run.h"

namespace dtrain::parallel {

struct CheckpointWriterOptions {
  std::string dir;     // the job's checkpoint directory: step_N/ and `latest` inside
  int rank = 0;        // this rank (plan/ranks.h RankIndex); rank 0 seals
  int world_size = 1;  // the ranks that write each step
  // The same on every rank of this run and new for each run (ParallelTrainer agrees on one
  // when it starts): rank 0 takes only entries with this token.
  std::string run_token;
  // Rank 0: how long to wait for the other ranks' entries once its own are written.
  absl::Duration seal_timeout = absl::Seconds(60);
  // Rank 0, asked while it waits for the other ranks' entries (when set; every 2 to 50 ms): a
  // non-OK status (a rank gone) ends the wait with that error, since its entries will never
  // come; Cancelled (this rank's transport shut down: the run is being stopped) shortens it to
  // a second.
  std::function<absl::Status()> peers_failed;
  // Rank 0, asked beside peers_failed (when set): the first rank that left the run cleanly
  // (seal_watch.h FirstPeerLeft), or "". Its entries are there or never coming: the wait ends
  // left_peer_grace later (time for a shared file system to show what it published), with an
  // Aborted error naming it.
  std::function<std::string()> peer_left;
  absl::Duration left_peer_grace = absl::Seconds(10);
  // Rank 0: seals `step` from every rank's entries (manifest, then `latest`) in `dir`, the
  // job directory the writer holds.
  std::function<absl::Status(const model::HeldDirectory& dir, int64_t step,
                             std::vector<ShardFileEntry> entries)>
      seal;
  // Rank 0, after each seal: the retention of model::PruneSealedSteps (0: keep every step).
  int keep_last = 0;
  int64_t keep_every = 0;
  // false: Submit returns only once the step is written (and sealed, on rank 0): the
  // synchronous checkpoints of earlier versions, kept to measure against.
  bool background = true;
  // The run's number within its job (model::RunClaim.attempt), whose claim on `dir` with
  // run_token PrepareJobDirectory made. Set: every rank checks the claim before it writes a
  // step, rank 0 again before it seals, removes or prunes one, and a run whose claim was
  // replaced (it was frozen past its recovery) writes nothing more: the step fails Aborted
  // naming both runs (model/run_claim.h). Unset: no claim (tools, tests).
  std::optional<int64_t> run_attempt;
  // Test-only (dtrain-worker-testing's --test_only_stop_before_seal): rank 0 calls it with the
  // step just before it checks the claim and seals.
  std::function<void(int64_t step)> test_only_before_seal;
};

// A new run's token: 48 random bits (rank 0 draws them; ParallelTrainer then agrees on them
// with the other ranks), and their text "5f0c3a1b9e2d", as every rank of the run writes it.
uint64_t NewRunTokenBits();
std::string RunTokenText(uint64_t bits);

// "rank-00003.entries.json": where rank `rank` publishes its entries inside the step directory.
std::string RankEntriesFileName(int rank);

class CheckpointWriter {
 public:
  // Opens options.dir (created if missing) and holds it; Submit returns the error if it could
  // not be opened.
  explicit CheckpointWriter(CheckpointWriterOptions options);
  // Waits for this rank's own writes; rank 0 stops waiting for other ranks at once (Abandon).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Hands over step `step`'s files of this rank (names unique, entries without bytes and
  // checksum) and returns; `snapshot_seconds` is what taking them cost the caller. Waits first
  // for the previous step, whose failure it returns (FailedPrecondition for a step not above
  // the previous one). Foreground (options.background false): returns once the step is done.
  // `keep`: retention keeps this step from now on (the best validation step; a later kept step
  // replaces it).
  // The next Submit may write the last step submitted again (it was skipped for want of space:
  // final_checkpoint.h).
  void AllowRewriteOfLastStep() { rewrite_last_ = true; }
  absl::Status Submit(int64_t step, std::vector<PendingFile> files, double snapshot_seconds,
                      bool keep = false);

  // The steps finished since the last call (at most one), without waiting; the error of one
  // that failed.
  absl::StatusOr<std::vector<CheckpointWritten>> TakeFinished();

  // Waits for the step in flight, then TakeFinished.
  absl::StatusOr<std::vector<CheckpointWritten>> Finish();

  // For a run that ends in error: rank 0 waits at most `grace` more for the other ranks'
  // entries of the step in flight (they may never come), then fails that step (Aborted).
  void Abandon(absl::Duration grace);

 private:
  // Steps 1-3 of the header for one step; on the writer's thread.
  absl::StatusOr<CheckpointWritten> Write(int64_t step, std::vector<PendingFile> files);
  // Rank 0: every rank's entries of `step`, once all are published.
  struct RankEntries {
    std::vector<ShardFileEntry> files;
    std::string skipped;  // "rank 1: <why>; rank 3: <why>" for the ranks that skip the step
  };
  absl::StatusOr<RankEntries> AwaitEntries(int64_t step, const model::HeldDirectory& step_dir);
  // OK while this run holds the directory's claim (or keeps none: options.run_attempt unset).
  absl::Status StillClaimed(absl::string_view where) const;
  void Join();  // joins the thread of the step in flight, if any

  const CheckpointWriterOptions options_;
  const absl::StatusOr<model::HeldDirectory> dir_;  // options_.dir, held
  std::thread thread_;                              // the step in flight (joinable) or none
  int64_t last_step_ = -1;                          // the last step submitted
  bool rewrite_last_ = false;                       // AllowRewriteOfLastStep, for one Submit
  int64_t keep_step_ = 0;       // Submit's last `keep` step; set only while no thread runs
  double blocked_seconds_ = 0;  // the step in flight's snapshot and wait for its predecessor
  absl::Mutex mu_;
  absl::CondVar changed_;
  bool done_ ABSL_GUARDED_BY(mu_) = true;  // no step in flight, or its thread finished
  absl::Time abandon_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::vector<CheckpointWritten> finished_ ABSL_GUARDED_BY(mu_);  // not yet taken
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // a step failed: every later call returns it
};

// Whether the sealed step in `step_dir` is intact: its manifest parses, matches its own
// checksum (version 3), names only plain file names, and every file it lists is there (a
// regular file, not a symlink) with the size it records (checked before reading: a larger file
// is never read) and the checksum it records. OK, or DataLoss saying what is damaged in
// short words ("model-pp0-tp0-c0.safetensors: checksum differs"). Reads every file once; the
// model::StepCheck that resuming applies to a job's newest step (model::ResolveCheckpoint).
// A one-worker step of the format before issue 12 (no manifest) has nothing to verify: OK.
absl::Status VerifySealedStep(const std::string& step_dir);

// A run resuming in its own job directory `dir` from before damaged sealed steps
// (model::CheckpointStep::damaged) will write those steps again, and a sealed step is never
// rewritten: each of `damaged` inside `dir` is renamed to DIR/damaged-step_N (-2, -3, ... when
// taken), which no resume takes for a step. Others (another job's directory) are left alone.
// Call on one rank (rank 0), before any rank can reach those steps.
absl::Status SetAsideDamagedSteps(const std::string& dir, const std::vector<std::string>& damaged);

// What rank 0 does to job directory `dir` before a run writes its first step: claims it for
// `run` (model::ClaimRun: Aborted, touching nothing, when a later run holds it), sets `damaged`
// aside (SetAsideDamagedSteps), then removes what writers killed or cancelled earlier left
// (model::RemoveOrphans: temporary files, unsealed steps; never a sealed step). Returns a
// sentence for the job's log when something was removed, else "".
absl::StatusOr<std::string> PrepareJobDirectory(const std::string& dir,
                                                const std::vector<std::string>& damaged,
                                                const model::RunClaim& run);

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_CHECKPOINT_WRITER_H_
