// RemoveJobDirectory: what a worker does with a deleted job's directory that the coordinator
// asks it to remove (HeartbeatResponse.remove_dirs, `dtrain delete JOB --files`).
//
// The coordinator only names a path; the worker removes it only when all of these hold, and
// otherwise leaves it whole and says why (DIR_REMOVAL_FAILED, `error` naming the directory):
//
//   shape     `dir` is absolute and normalized (AbsolutePath(dir) == dir), its last component
//             is the job's id, and the id is one (IsJobId): never a parent or another job's.
//   roots     it resolves inside this worker's allowed roots (common/path_policy.h
//             CheckPathResolved: no symlink on the way leads out), is not itself a symlink,
//             and is not one of the roots.
//   claim     its job.json (common/job_paths.h ReadJobClaim) names this job id and uid: a
//             directory without a claim, or another job's (another coordinator database), is
//             not removed.
//
// A directory that is not there is DIR_ABSENT (removed by hand, or never written). The tree is
// removed without following symlinks: a link inside it is removed as a link, its target (inside
// the roots or not) is left alone; nothing on another filesystem mounted inside it is touched.
//
//   JobDirRemoved r = RemoveJobDirectory(removal, options.allowed_roots, "w1", "host-a");
//   // r.state() == DIR_REMOVED, r.bytes() == 432365158 (the sizes of its regular files)
//   // or DIR_REMOVAL_FAILED, r.error() == "job directory /ckpt/job-000003 belongs to
//   //   job-000003 (uid 5f0c...), not to job-000003 (uid 9a1b...): not removed"
//
// Blocking (removing gigabytes takes a while): the worker daemon calls it off its control thread.
#ifndef DTRAIN_WORKER_DAEMON_JOB_DIR_REMOVAL_H_
#define DTRAIN_WORKER_DAEMON_JOB_DIR_REMOVAL_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/coordinator.pb.h"

namespace dtrain::worker {

// Removes `removal.dir` when the rules above allow it. `roots`: the worker's resolved allowed
// roots (ResolveRoots). Every answer carries the removal's job_id and dir, `worker_id` and
// `host_label`; DIR_REMOVED carries the bytes freed (st_size of its regular files).
JobDirRemoved RemoveJobDirectory(const JobDirRemoval& removal,
                                 const std::vector<std::string>& roots, absl::string_view worker_id,
                                 absl::string_view host_label);

// One line for the worker's log: "removed job directory /ckpt/job-000003 of deleted job-000003:
// 412.3 MiB freed", "job directory ... of deleted job-000003 is already gone", or "did not
// remove the directory of deleted job-000003: <error>".
std::string DescribeJobDirRemoved(const JobDirRemoved& removed);

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_JOB_DIR_REMOVAL_H_
