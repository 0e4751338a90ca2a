#include "worker/daemon/session_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dtrain::worker {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<SessionLock> SessionLock::Claim(
    const std::string& dir, const std::string& worker_id, const std::string& session_id,
    absl::Duration wait, const std::function<void(const std::string&)>& waiting) {
  std::string name = worker_id;  // a file name: no '/' (ids are free text)
  std::replace(name.begin(), name.end(), '/', '_');
  std::string path = absl::StrCat(dir, "/.worker-", name, ".session");
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("open", path);
  const std::string held =
      absl::StrCat("another dtrain-worker process with --worker_id=", worker_id,
                   " and this --data_root is running (it holds ", path, ")");
  const absl::Time give_up = absl::Now() + wait;
  bool said = false;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK && absl::Now() < give_up) {
      if (!said && waiting) {
        waiting(absl::StrCat(held, "; waiting up to ", absl::FormatDuration(wait),
                             " for it to exit, in case it is a previous process of this worker "
                             "still stopping"));
      }
      said = true;
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    close(fd);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          held, said ? absl::StrCat(" and still was after ", absl::FormatDuration(wait)) : "",
          ": every worker process needs its own --worker_id"));
    }
    errno = error;
    return Errno("lock", path);
  }
  char buffer[300] = {};
  const ssize_t n = pread(fd, buffer, sizeof buffer - 1, 0);
  std::string previous(buffer, n > 0 ? static_cast<size_t>(n) : 0);
  absl::StripAsciiWhitespace(&previous);
  const std::string line = session_id + "\n";
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    const absl::Status status = Errno("write", path);
    close(fd);
    return status;
  }
  return SessionLock(fd, std::move(path), std::move(previous));
}

SessionLock::SessionLock(SessionLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      previous_(std::move(other.previous_)) {}

SessionLock::~SessionLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace dtrain::worker
