#include "common/job_paths.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"

namespace dtrain {
namespace {

// "<what>: <strerror>" (absl::ErrnoToStatus appends the errno's text), as in common/files.h.
absl::Status ErrnoError(int err, absl::string_view what) { return absl::ErrnoToStatus(err, what); }

// The value of "key": "value" in the claim file (written by ClaimJobDirectory only).
std::string ClaimField(absl::string_view text, absl::string_view key) {
  const std::string needle = absl::StrCat("\"", key, "\": \"");
  const size_t at = text.find(needle);
  if (at == absl::string_view::npos) return "";
  const size_t start = at + needle.size();
  const size_t end = text.find('"', start);
  if (end == absl::string_view::npos) return "";
  return std::string(text.substr(start, end - start));
}

// True when `dir` has a step_* directory or a `latest` file: checkpoints of some job.
bool HoldsCheckpoints(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    const absl::string_view name = e->d_name;
    if (absl::StartsWith(name, "step_") || name == kLatestFileName) found = true;
  }
  closedir(d);
  return found;
}

}  // namespace

std::string JobIdFor(int64_t number) { return absl::StrFormat("job-%06d", number); }

std::optional<int64_t> JobNumberIn(absl::string_view text) {
  int64_t number = 0;
  if (!IsJobId(text) || !absl::SimpleAtoi(text.substr(4), &number) || number <= 0) {
    return std::nullopt;
  }
  return number;
}

std::optional<int64_t> JobNumberOf(absl::string_view id) {
  const std::optional<int64_t> number = JobNumberIn(id);
  if (!number.has_value() || JobIdFor(*number) != id) return std::nullopt;
  return number;
}

bool IsJobId(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, "job-") || text.empty()) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

std::string JobDirectory(absl::string_view checkpoint_dir, absl::string_view job_id,
                         absl::string_view data_root) {
  if (!checkpoint_dir.empty()) {
    absl::ConsumeSuffix(&checkpoint_dir, "/");
    return absl::StrCat(checkpoint_dir, "/", job_id);
  }
  absl::ConsumeSuffix(&data_root, "/");
  return absl::StrCat(data_root, "/jobs/", job_id);
}

std::string StepDirName(int64_t step) { return absl::StrFormat("step_%08d", step); }

std::string AbsolutePath(absl::string_view path) {
  if (path.empty()) return "";
  std::string full;
  if (path[0] == '/') {
    full = std::string(path);
  } else {
    char cwd[4096];
    full = absl::StrCat(getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : ".", "/", path);
  }
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(full, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

absl::Status MakeDirectories(const std::string& dir) {
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string prefix = dir.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoError(errno, absl::StrCat("cannot create directory ", prefix));
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobClaim> ReadJobClaim(const std::string& dir) {
  const std::string claim_path = absl::StrCat(dir, "/", kJobClaimFileName);
  struct stat st;
  absl::StatusOr<int> opened = OpenRegularFile(claim_path, &st);
  if (absl::IsNotFound(opened.status())) {
    return absl::NotFoundError(absl::StrCat("job directory ", dir, " has no ", kJobClaimFileName));
  }
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  std::string text;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int read_errno = errno;
      close(fd);
      return ErrnoError(read_errno, absl::StrCat("cannot read ", claim_path));
    }
    if (n == 0) break;
    // A claim is one short line: a file far larger is not one (read no further).
    if (text.size() > (1 << 16)) break;
    text.append(buf, n);
  }
  close(fd);
  return JobClaim{ClaimField(text, "job_id"), ClaimField(text, "job_uid")};
}

absl::Status ClaimJobDirectory(const std::string& dir, absl::string_view job_id,
                               absl::string_view job_uid) {
  const std::string claim_path = absl::StrCat(dir, "/", kJobClaimFileName);
  struct stat st;
  const bool existed = stat(dir.c_str(), &st) == 0;
  if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
  const std::string claim =
      absl::StrFormat("{\"job_id\": \"%s\", \"job_uid\": \"%s\"}\n", job_id, job_uid);
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<JobClaim> found = ReadJobClaim(dir);
    if (found.ok()) {
      if (found->job_uid == job_uid) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat(
          "job directory ", dir, " belongs to ", found->job_id, " (uid ", found->job_uid,
          "), not to this ", job_id, " (uid ", job_uid,
          "): it comes from another coordinator database; choose another checkpoint.dir or "
          "move that directory away"));
    }
    if (!absl::IsNotFound(found.status())) return found.status();
    if (existed && HoldsCheckpoints(dir)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job directory ", dir, " already holds checkpoints but no ", kJobClaimFileName,
          " naming their job: it was not written by this job; choose another checkpoint.dir or "
          "move that directory away"));
    }
    // Write a temporary file, then link it to the claim's name: link() fails if a claim
    // appeared meanwhile (another rank or process), so exactly one claim wins, whole.
    const std::string temp = absl::StrFormat("%s.tmp.%d", claim_path, getpid());
    const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError(errno, absl::StrCat("cannot write ", temp));
    const bool written =
        write(fd, claim.data(), claim.size()) == static_cast<ssize_t>(claim.size()) &&
        fsync(fd) == 0;
    const int write_errno = errno;
    close(fd);
    if (!written) {
      unlink(temp.c_str());
      return ErrnoError(write_errno, absl::StrCat("cannot write ", temp));
    }
    const int linked = link(temp.c_str(), claim_path.c_str());
    const int link_errno = errno;
    unlink(temp.c_str());
    if (linked == 0) return absl::OkStatus();
    if (link_errno != EEXIST) {
      return ErrnoError(link_errno, absl::StrCat("cannot create ", claim_path));
    }
    // Lost the race: read the winner's claim.
  }
  return absl::InternalError(absl::StrCat("cannot read the claim ", claim_path));
}

}  // namespace dtrain
