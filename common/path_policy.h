// Which paths a job may read and write on a worker: the one rule that the worker (before it reads
// or writes anything of a job) and the coordinator (at submit, from the roots workers declared
// at registration) both apply.
//
// A worker's roots are its --data_root and its --allowed_paths, each absolute and resolved
// (realpath) at start. A path a spec names (dataset, init_checkpoint, resume_from,
// checkpoint.dir: plan/spec_paths.h lists them) is allowed when it lies inside one of them:
//
//   lexically   made absolute against the working directory (relative spec paths resolve from
//               the worker's cwd, as they always did), "." and ".." removed, inside a root.
//               "/data2/x" is not inside "/data"; a root itself is inside.
//   resolved    on the worker, the realpath of the longest prefix that exists (a checkpoint
//               directory may not exist yet) with the rest appended is inside a root, so a
//               symlink inside a root that points outside it is refused. A dangling symlink on
//               the way is refused too (creating through it would write wherever it points).
//
//   ASSIGN_OR_RETURN(std::vector<std::string> roots, ResolveRoots({"/var/lib/dtrain"}));
//   RETURN_IF_ERROR(CheckPathResolved("dataset", spec.dataset(), roots));
//   // FailedPrecondition "dataset /etc/passwd is outside this worker's allowed roots
//   //   (/var/lib/dtrain, /datasets): set --allowed_paths on the worker to allow it"
//
// The resolved check is made once, before the job opens anything; a symlink swapped in after it
// (by someone who can write inside a root) is not caught.
#ifndef DTRAIN_COMMON_PATH_POLICY_H_
#define DTRAIN_COMMON_PATH_POLICY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain {

// `path` as a spec gave it, with where a relative one resolves from: "data/demo.txt (relative,
// resolved from /srv/w1, the worker's working directory)"; an absolute one as it is.
std::string DescribeSpecPath(absl::string_view path);

// The entries of a comma-separated --allowed_paths ("/datasets,/shared/ckpt"), empty ones
// skipped.
std::vector<std::string> SplitPathList(absl::string_view list);

// Each of `dirs` made absolute and resolved (realpath), duplicates dropped, in order.
// NotFound / FailedPrecondition naming the directory when one does not exist or is not a
// directory (a worker does not start with a root it cannot use).
absl::StatusOr<std::vector<std::string>> ResolveRoots(const std::vector<std::string>& dirs);

// What a worker declares at registration, for the coordinator's lexical check at submit: its
// resolved `roots`, then each of `given` (the directories before ResolveRoots) made absolute
// when that differs, i.e. reached through a symlink: a root given as /datasets that resolves to
// /mnt/data declares both, so that a spec's "/datasets/x" is not refused at submit (the worker
// resolves it to /mnt/data/x, inside). Duplicates dropped.
std::vector<std::string> DeclaredRoots(const std::vector<std::string>& given,
                                       const std::vector<std::string>& roots);

// True when `path` is `root` or below it, component by component ("/data/x" is inside "/data",
// "/data2" is not). Both absolute and normalized (AbsolutePath, or realpath).
bool IsInsideRoot(absl::string_view path, absl::string_view root);

// InvalidArgument when `path` is relative and climbs above where it starts with ".."
// ("../etc/passwd", "data/../../x"): the coordinator cannot know a worker's working directory,
// but such a path is meant to leave it. Absolute paths and "" are OK here.
absl::Status CheckPathShape(absl::string_view what, absl::string_view path);

// True when `path`, made absolute (AbsolutePath: the process's working directory) and
// normalized, is inside one of `roots`.
bool IsInsideRootsLexically(absl::string_view path, const std::vector<std::string>& roots);

// OK when `path` (field `what` of the spec) resolves inside one of this worker's `roots`
// (see the top). FailedPrecondition naming the path, what it resolved to when that differs
// (a symlink), and the roots; "" is OK (the field is unset).
absl::Status CheckPathResolved(absl::string_view what, absl::string_view path,
                               const std::vector<std::string>& roots);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_PATH_POLICY_H_
