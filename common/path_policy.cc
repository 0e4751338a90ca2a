#include "common/path_policy.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/job_paths.h"

namespace dtrain {
namespace {

// realpath(3) as a string; nullopt-like "" with errno set when it fails.
std::string RealPath(const std::string& path, int* err) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) {
    *err = errno;
    return "";
  }
  *err = 0;
  return resolved;
}

// "/a/b" + "c/d" -> "/a/b/c/d"; "/" + "c" -> "/c".
std::string Join(absl::string_view dir, absl::string_view rest) {
  if (rest.empty()) return std::string(dir);
  if (absl::EndsWith(dir, "/")) return absl::StrCat(dir, rest);
  return absl::StrCat(dir, "/", rest);
}

absl::Status Outside(absl::string_view what, absl::string_view path, absl::string_view resolved,
                     const std::vector<std::string>& roots) {
  std::string shown = DescribeSpecPath(path);
  if (resolved != AbsolutePath(path)) absl::StrAppend(&shown, " resolves to ", resolved, ", which");
  return absl::FailedPreconditionError(
      absl::StrCat(what, " ", shown, " is outside this worker's allowed roots (",
                   absl::StrJoin(roots, ", "), "): set --allowed_paths on the worker to allow it"));
}

}  // namespace

std::string DescribeSpecPath(absl::string_view path) {
  if (path.empty() || path[0] == '/') return std::string(path);
  return absl::StrCat(path, " (relative, resolved from ", AbsolutePath("."),
                      ", the worker's working directory)");
}

std::vector<std::string> SplitPathList(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveRoots(const std::vector<std::string>& dirs) {
  std::vector<std::string> roots;
  for (const std::string& dir : dirs) {
    int err = 0;
    const std::string resolved = RealPath(AbsolutePath(dir), &err);
    if (resolved.empty()) {
      return absl::ErrnoToStatus(err, absl::StrCat("allowed root ", dir, " cannot be used"));
    }
    struct stat st;
    if (stat(resolved.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("allowed root ", dir, " is not a directory"));
    }
    if (std::find(roots.begin(), roots.end(), resolved) == roots.end()) {
      roots.push_back(resolved);
    }
  }
  return roots;
}

std::vector<std::string> DeclaredRoots(const std::vector<std::string>& given,
                                       const std::vector<std::string>& roots) {
  std::vector<std::string> declared = roots;
  for (const std::string& dir : given) {
    const std::string absolute = AbsolutePath(dir);
    if (std::find(declared.begin(), declared.end(), absolute) == declared.end()) {
      declared.push_back(absolute);
    }
  }
  return declared;
}

bool IsInsideRoot(absl::string_view path, absl::string_view root) {
  absl::ConsumeSuffix(&root, "/");  // "/" becomes "", inside which every absolute path lies
  if (!absl::ConsumePrefix(&path, root)) return false;
  return path.empty() || path[0] == '/';
}

absl::Status CheckPathShape(absl::string_view what, absl::string_view path) {
  if (path.empty() || path[0] == '/') return absl::OkStatus();
  int depth = 0;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    depth += part == ".." ? -1 : 1;
    if (depth < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " ", path,
          " climbs above the worker's working directory with \"..\": name a path inside the "
          "workers' allowed roots"));
    }
  }
  return absl::OkStatus();
}

bool IsInsideRootsLexically(absl::string_view path, const std::vector<std::string>& roots) {
  const std::string absolute = AbsolutePath(path);
  return std::any_of(roots.begin(), roots.end(),
                     [&](const std::string& root) { return IsInsideRoot(absolute, root); });
}

absl::Status CheckPathResolved(absl::string_view what, absl::string_view path,
                               const std::vector<std::string>& roots) {
  if (path.empty()) return absl::OkStatus();
  // The longest existing prefix, resolved; the components after it do not exist, so they hold
  // no symlink (and no ".": AbsolutePath removed those).
  std::string prefix = AbsolutePath(path);
  std::string rest;
  std::string resolved;
  while (true) {
    int err = 0;
    resolved = RealPath(prefix, &err);
    if (!resolved.empty()) break;
    if (err != ENOENT && err != ENOTDIR) {
      return absl::ErrnoToStatus(
          err, absl::StrCat(what, " ", DescribeSpecPath(path), " cannot be resolved at ", prefix));
    }
    struct stat st;
    if (lstat(prefix.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " ", DescribeSpecPath(path), " goes through ", prefix,
          ", a symlink to a missing target: writing through it could leave this worker's "
          "allowed roots (",
          absl::StrJoin(roots, ", "), ")"));
    }
    const size_t slash = prefix.rfind('/');
    rest = rest.empty() ? prefix.substr(slash + 1) : Join(prefix.substr(slash + 1), rest);
    prefix = slash == 0 ? "/" : prefix.substr(0, slash);
  }
  resolved = Join(resolved, rest);
  for (const std::string& root : roots) {
    if (IsInsideRoot(resolved, root)) return absl::OkStatus();
  }
  return Outside(what, path, resolved, roots);
}

}  // namespace dtrain
