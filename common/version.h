// The version of the dtrain binaries and the commit they were built from, for `--version`.
//
//   VersionText("dtrain-worker") -> "dtrain-worker 0.11.0 (commit 1a2b3c4d...)"
//
// The commit is Bazel's workspace status (.bazelrc runs tools/workspace_status.sh): `git
// rev-parse HEAD` of the checkout the binary was built from, "unknown" where the sources are not
// a git checkout or git is absent (a docker build, a source tarball). It names the commit, not
// uncommitted edits on top of it.
#ifndef DTRAIN_COMMON_VERSION_H_
#define DTRAIN_COMMON_VERSION_H_

#include <string>

#include "absl/strings/string_view.h"

namespace dtrain {

// dtrain's release version, raised by hand when a release is cut.
inline constexpr char kVersion[] = "0.11.0";

// The full commit hash the binary was built from, or "unknown".
std::string BuildCommit();

// "<program> <version> (commit <hash>)": what every binary's --version prints.
std::string VersionText(absl::string_view program);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_VERSION_H_
