#include "worker/daemon/job_dir_removal.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/job_paths.h"
#include "common/path_policy.h"
#include "plan/format_bytes.h"

namespace dtrain::worker {
namespace {

// What the walk of one removal did so far. nftw's callback takes no argument of ours, so the
// walk in progress on this thread is reached through `current_walk` (one walk per thread at a
// time; removals on several threads do not meet).
struct Walk {
  int64_t bytes = 0;  // freed so far
  std::string error;  // the first failure: "<path>: <strerror>"
};
thread_local Walk* current_walk = nullptr;

// Called for each entry, children before their directory (FTW_DEPTH), links as links
// (FTW_PHYS): removes it. Non-zero stops the walk.
int RemoveEntry(const char* path, const struct stat* st, int type, struct FTW*) {
  Walk& walk = *current_walk;
  if (type == FTW_NS || type == FTW_DNR) {
    const int err = errno != 0 ? errno : EACCES;
    walk.error = absl::StrCat(type == FTW_NS ? "cannot stat " : "cannot read directory ", path,
                              ": ", strerror(err));
    return 1;
  }
  // The bytes the file holds as `ls -l` shows them (st_size), not the blocks it occupies
  // (st_blocks * 512): the figure checkpoints are reported in; a sparse file counts in full.
  const int64_t size = type == FTW_F && S_ISREG(st->st_mode) ? st->st_size : 0;
  if (remove(path) != 0) {
    walk.error = absl::StrCat(path, ": ", strerror(errno));
    return 1;
  }
  walk.bytes += size;
  return 0;
}

JobDirRemoved Refused(JobDirRemoved answer, std::string error) {
  answer.set_state(DIR_REMOVAL_FAILED);
  answer.set_error(std::move(error));
  return answer;
}

// "" when `removal` names a job directory of the right shape inside `roots`; else why not
// ("job directory <dir> ...").
std::string ShapeRefusal(const JobDirRemoval& removal, const std::vector<std::string>& roots) {
  const std::string& dir = removal.dir();
  const std::string named = absl::StrCat("job directory ", dir);
  if (!IsJobId(removal.job_id())) {
    return absl::StrCat(named, " is not removed: \"", removal.job_id(), "\" is not a job id");
  }
  if (dir.empty() || dir[0] != '/' || AbsolutePath(dir) != dir) {
    return absl::StrCat(named, " is not an absolute, normalized path: not removed");
  }
  if (dir.substr(dir.rfind('/') + 1) != removal.job_id()) {
    return absl::StrCat(named, " is not named for ", removal.job_id(), ": not removed");
  }
  // Its message names the directory: "job directory /x is outside this worker's allowed ...".
  const absl::Status inside = CheckPathResolved("job directory", dir, roots);
  if (!inside.ok()) return absl::StrCat(inside.message(), "; not removed");
  return "";
}

// "" when the existing directory `dir` (lstat: `st`) may be removed as `removal`'s; else why
// not, after "job directory <dir> ".
std::string ClaimRefusal(const JobDirRemoval& removal, const struct stat& st,
                         const std::vector<std::string>& roots) {
  const std::string& dir = removal.dir();
  if (S_ISLNK(st.st_mode)) return "is a symlink: not removed (nor what it points to)";
  if (!S_ISDIR(st.st_mode)) return "is not a directory: not removed";
  char resolved[PATH_MAX];
  if (realpath(dir.c_str(), resolved) == nullptr) {
    return absl::StrCat("cannot be resolved (", strerror(errno), "): not removed");
  }
  for (const std::string& root : roots) {
    if (root == resolved) return "is one of this worker's allowed roots: not removed";
  }
  absl::StatusOr<JobClaim> claim = ReadJobClaim(dir);
  if (absl::IsNotFound(claim.status())) {
    return absl::StrCat("has no ", kJobClaimFileName,
                        " claim: not removed; remove it by hand if it is this job's");
  }
  if (!claim.ok()) {
    return absl::StrCat("has an unreadable claim (", claim.status().message(), "): not removed");
  }
  if (claim->job_id != removal.job_id() || claim->job_uid != removal.job_uid()) {
    return absl::StrCat("belongs to ", claim->job_id, " (uid ", claim->job_uid, "), not to ",
                        removal.job_id(), " (uid ", removal.job_uid(), "): not removed");
  }
  return "";
}

}  // namespace

JobDirRemoved RemoveJobDirectory(const JobDirRemoval& removal,
                                 const std::vector<std::string>& roots, absl::string_view worker_id,
                                 absl::string_view host_label) {
  JobDirRemoved answer;
  answer.set_job_id(removal.job_id());
  answer.set_dir(removal.dir());
  answer.set_worker_id(std::string(worker_id));
  answer.set_host(std::string(host_label));
  const std::string& dir = removal.dir();
  if (std::string why = ShapeRefusal(removal, roots); !why.empty()) {
    return Refused(std::move(answer), std::move(why));
  }
  const std::string named = absl::StrCat("job directory ", dir, " ");
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      answer.set_state(DIR_ABSENT);
      return answer;
    }
    return Refused(std::move(answer), absl::StrCat(named, "cannot be examined: ", strerror(errno)));
  }
  if (std::string why = ClaimRefusal(removal, st, roots); !why.empty()) {
    return Refused(std::move(answer), named + why);
  }
  Walk walk;
  current_walk = &walk;
  // FTW_MOUNT: a filesystem mounted inside the directory is skipped, not entered: its mount
  // point and the directories above it stay, and the removal fails ("Directory not empty").
  const int walked = nftw(dir.c_str(), RemoveEntry, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  const int walk_errno = errno;
  current_walk = nullptr;
  if (walked != 0) {
    if (walk.error.empty()) walk.error = absl::StrCat(dir, ": ", strerror(walk_errno));
    return Refused(std::move(answer),
                   absl::StrCat(named, "could not be removed whole: ", walk.error, " (",
                                plan::FormatBytes(walk.bytes), " freed before)"));
  }
  answer.set_state(DIR_REMOVED);
  answer.set_bytes(walk.bytes);
  return answer;
}

std::string DescribeJobDirRemoved(const JobDirRemoved& removed) {
  switch (removed.state()) {
    case DIR_REMOVED:
      return absl::StrCat("removed job directory ", removed.dir(), " of deleted ", removed.job_id(),
                          ": ", plan::FormatBytes(removed.bytes()), " freed");
    case DIR_ABSENT:
      return absl::StrCat("job directory ", removed.dir(), " of deleted ", removed.job_id(),
                          " is already gone: nothing to remove");
    default:
      return absl::StrCat("did not remove the directory of deleted ", removed.job_id(), ": ",
                          removed.error());
  }
}

}  // namespace dtrain::worker
