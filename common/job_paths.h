// Where a job's files live on a worker: the one rule that the coordinator (resume_from by job
// id, status), the workers (writing) and the CLI (showing) all apply.
//
//   <checkpoint.dir>/<job id>/          when the spec names checkpoint.dir
//   <data_root>/jobs/<job id>/          otherwise (one-worker jobs: the final weights only)
//     job.json              the claim: {"job_id": ..., "job_uid": ...}, written first by rank 0
//     run                   which run writes it now: "attempt 1 run 5f0c3a1b9e2d"
//                           (worker/model/run_claim.h), replaced by each run's rank 0
//     step_00000040/        one sealed or unsealed checkpoint step
//     latest                "step_00000040\n": the newest sealed step
//     model.safetensors     the final weights
//
// A job writes nothing outside its own directory, so two jobs that name the same
// checkpoint.dir (a resubmitted spec, two seeds at once) never touch each other's files, and a
// job's `output` is always its own. A job of another coordinator database that happens to have
// the same id finds the directory claimed by another uid and is refused (ClaimJobDirectory).
#ifndef DTRAIN_COMMON_JOB_PATHS_H_
#define DTRAIN_COMMON_JOB_PATHS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain {

inline constexpr char kJobClaimFileName[] = "job.json";
inline constexpr char kLatestFileName[] = "latest";
inline constexpr char kFinalWeightsFileName[] = "model.safetensors";

// The id of the job numbered `number` (from 1): "job-000012".
std::string JobIdFor(int64_t number);

// True for "job-" followed by digits only ("job-000012"): a job id, not a path.
bool IsJobId(absl::string_view text);

// The number an id-shaped text names, however it is spelled ("job-12", "job-000012" -> 12);
// nothing for text that is not IsJobId or names no job (0).
std::optional<int64_t> JobNumberIn(absl::string_view text);

// The number of the job whose id is `id`, in its one spelling (JobIdFor: "job-000012" -> 12);
// nothing for any other text, "job-12" and "job-0000012" included. The coordinator finds jobs
// by number and authorizes calls on them by id: both must read an id the same way, or one
// spelling could name a job the other does not see.
std::optional<int64_t> JobNumberOf(absl::string_view id);

// The job's own directory, from its spec's checkpoint.dir (may be empty) and the worker's
// --data_root. Relative inputs give a relative result (resolved from the worker's working
// directory; see AbsolutePath). The job id must be an id (IsJobId), so it cannot escape.
std::string JobDirectory(absl::string_view checkpoint_dir, absl::string_view job_id,
                         absl::string_view data_root);

// "step_00000040".
std::string StepDirName(int64_t step);

// `path` made absolute against the process's working directory, with "." and ".." components
// and repeated slashes removed (lexically: symlinks are not resolved). "" stays "".
std::string AbsolutePath(absl::string_view path);

// Creates `dir` and its missing parents (mode 0755). FailedPrecondition naming the path when a
// component exists and is not a directory; the errno's status when one cannot be created.
absl::Status MakeDirectories(const std::string& dir);

// Claims `dir` (created with its parents if missing) for the job: writes job.json with the id
// and uid when absent; OK when it names the same uid (the same job, e.g. a rank started again).
// FailedPrecondition when another job's claim is there ("... belongs to job-000003 (uid ...),
// not to this job-000003 (uid ...): it comes from another coordinator database; choose another
// checkpoint.dir or move it away"), or when the directory holds checkpoints but no claim (a
// directory of an older dtrain, or copied by hand). Errors name the path.
absl::Status ClaimJobDirectory(const std::string& dir, absl::string_view job_id,
                               absl::string_view job_uid);

// What a job directory's job.json says: whose it is.
struct JobClaim {
  std::string job_id;
  std::string job_uid;
};

// Reads `dir`/job.json (as ClaimJobDirectory writes it). NotFound naming the file when there is
// none; the errno's status when it cannot be read. A field missing from the file reads as "".
//
//   ASSIGN_OR_RETURN(JobClaim claim, ReadJobClaim("/ckpt/job-000003"));
//   // claim.job_id == "job-000003", claim.job_uid == "5f0c..."
absl::StatusOr<JobClaim> ReadJobClaim(const std::string& dir);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_JOB_PATHS_H_
