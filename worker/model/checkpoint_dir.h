// Checkpoint directories without the model: where a step lives, how it is sealed, which step a
// path names. The checkpoint format (worker/parallel/sharded_checkpoint.h, one worker's and
// many workers' alike) uses it, and so does the export, which links no training code.
//
//   DIR/step_00000042/manifest.json          the step's manifest, written last: the seal
//   DIR/latest                               "step_00000042", moved after the seal
//
// One-worker steps of format version 1 (model.safetensors, then optimizer.safetensors as the
// seal) are still found, so that their loader can say how to carry them over
// (worker/parallel/manifest.h ReadManifest).
//
// Every directory and file is opened through model::HeldDirectory (held_directory.h): the job
// directory resolved once, step directories, `latest` and files never followed through a
// symlink, `latest` and manifests refused unread when oversized.
#ifndef DTRAIN_WORKER_MODEL_CHECKPOINT_DIR_H_
#define DTRAIN_WORKER_MODEL_CHECKPOINT_DIR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/held_directory.h"
#include "worker/model/safetensors.h"

namespace dtrain::model {

inline constexpr char kModelFileName[] = "model.safetensors";
inline constexpr char kOptimizerFileName[] = "optimizer.safetensors";  // seals a one-worker step
inline constexpr char kShardedManifestFileName[] = "manifest.json";    // seals a sharded step
// The most bytes a manifest may have: a larger one is refused unread.
inline constexpr int64_t kMaxManifestBytes = int64_t{64} << 20;

// The step-directory plumbing both checkpoint formats share (one worker's, and the sharded one
// in worker/parallel/sharded_checkpoint.h): a step is written into a fresh or unsealed
// directory, sealed by one file written last (`seal_file`: optimizer.safetensors, or
// manifest.json), and only then named by `latest`.
//
// DIR/step_<step> (absolute: common/job_paths.h's StepDirName), created with its parents.
// FailedPrecondition "will not overwrite DIR/step_00000040: it is a sealed checkpoint (it has
// <seal_file>; a finished checkpoint is never rewritten)" when the seal is already there, before
// anything is touched. An unsealed step (a save that did not finish) is returned to be
// written again.
// A symlink or file in the step's place (planted in a shared directory) is removed, never
// followed.
absl::StatusOr<HeldDirectory> PrepareStepDirectory(const HeldDirectory& dir, int64_t step,
                                                   absl::string_view seal_file);
// The same for a directory named by path (opened, created if missing); returns the step's path.
absl::StatusOr<std::string> PrepareStepDirectory(const std::string& dir, int64_t step,
                                                 absl::string_view seal_file);

// Step directory `step_dir` (a path) opened: its parent resolved once, the step directory
// itself never through a symlink (InvalidArgument naming it).
absl::StatusOr<HeldDirectory> OpenStepDirectory(const std::string& step_dir);

// Whether job directory `dir` has a sealed step (a real step directory holding its seal):
// a recovery resumes from it, else starts afresh. `latest` alone does not count.
bool HasSealedStep(const std::string& dir);

// The sealed steps of job directory `dir` (a path), oldest first; empty when it cannot be
// opened. What rank 0 reports after each seal and its retention (CheckpointSealed.kept_steps).
std::vector<int64_t> SealedStepsIn(const std::string& dir);

// At the start of a run in job directory `dir` (rank 0, before any rank writes): removes what
// killed or cancelled writers left behind, never a sealed step: "*.tmp.<pid>" files in the
// directory and its step directories, and step directories without a seal. Returns what was
// removed in words for the job's log ("removed 2 unsealed steps (step_00000040,
// step_00000050) and 3 temporary files (step_00000030/model-pp0-tp0-c0.safetensors.tmp.41)
// left by an earlier run"), or "" when nothing was.
absl::StatusOr<std::string> RemoveOrphans(const HeldDirectory& dir);

// Retention, after a step sealed in job directory `dir`: deletes the sealed steps beyond the
// newest `keep_last` (>= 1), oldest first, except milestones (steps that are multiples of
// `keep_every` > 0), the step `latest` names and `keep_step` (> 0: the job's best validation
// step, JobSpec.eval). Unsealed steps and set-aside damaged ones are not its business
// (RemoveOrphans). Returns the names deleted, oldest first.
absl::StatusOr<std::vector<std::string>> PruneSealedSteps(const HeldDirectory& dir, int keep_last,
                                                          int64_t keep_every,
                                                          int64_t keep_step = 0);

// Points DIR/latest at step_<step> ("step_00000040\n"), atomically; call after the step is
// sealed.
absl::Status PointLatestAt(const HeldDirectory& dir, int64_t step);
absl::Status PointLatestAt(const std::string& dir, int64_t step);

// A checkpoint step a resume_from (or export) path names, before anything is loaded.
struct CheckpointStep {
  std::string step_dir;  // absolute
  int64_t step = 0;
  // Set when the job's newest sealed step was damaged and an earlier one is used instead, for
  // the job's log: "step_00000040 is damaged (model-pp0-tp0-c0.safetensors: checksum
  // differs); resuming from step_00000030".
  std::string note;
  // The sealed step directories skipped as damaged (absolute, newest first): a run that goes
  // on in this job directory must set them aside before it writes those steps again
  // (worker/parallel/checkpoint_writer.h SetAsideDamagedSteps).
  std::vector<std::string> damaged;
};

// Whether a sealed step directory is intact (every file its seal lists, with its size and
// checksum): OK, or DataLoss with a short reason ("model-pp0-tp0-c0.safetensors: checksum
// differs"). worker/parallel/checkpoint_writer.h VerifySealedStep is the one for sharded steps.
using StepCheck = std::function<absl::Status(const std::string& step_dir)>;

// Resolves `path`, of either format (one worker's model.safetensors, or a sharded step's
// manifest.json): a job directory (its `latest`) or a step directory. A `latest` that is
// missing, empty, a symlink, oversized or not a step name (garbage bytes included) is not an
// error when the directory has sealed steps: the newest is found by scanning them, and `note`
// says so in one sentence ("latest is missing; resuming from step_00000030, the newest intact
// sealed step"). A directory holding only a job's final weights (model.safetensors, no step)
// is FailedPrecondition saying it is already a GPT-2 safetensors file. The step comes from the
// step directory's name (step_00000035) or, for a directory named otherwise, from its files.
// Reads only. NotFound when `path` does not exist; FailedPrecondition when it holds job
// directories but no `latest` ("... holds the directories of jobs job-000001, job-000002: name
// one of them, or the job id"), or no checkpoint at all. Errors name the path.
//
// With `check`, a job directory resolves to its newest intact sealed step: its sealed steps
// (and `latest`'s) are tried newest first and the first that passes `check` is returned, with a
// `note` naming what was skipped and why, or, when it is newer than `latest`'s (a seal cut
// short between its manifest and `latest`), saying so. The choice depends only on the files,
// so every rank of a job resolving the same directory picks the same step. DataLoss naming
// each step and its damage when no sealed step is intact. A step directory named directly is
// returned as it is (its loader verifies what it reads).
absl::StatusOr<CheckpointStep> ResolveCheckpoint(const std::string& path,
                                                 const StepCheck& check = nullptr);

// InvalidArgument when a run of `steps` total steps would not train beyond `checkpoint`:
// "steps=30 is not beyond step 35 of the checkpoint /abs/step_00000035 (resume_from): there
// is nothing to train; set steps above 35". Both trainers check it before loading anything.
absl::Status CheckStepsBeyond(int64_t steps, const CheckpointStep& checkpoint);

// The "step" metadata of a dtrain checkpoint file (model.safetensors, optimizer.safetensors);
// DataLoss naming the file when it has none.
absl::StatusOr<int64_t> StepOf(const SafetensorsFile& file);

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_CHECKPOINT_DIR_H_
