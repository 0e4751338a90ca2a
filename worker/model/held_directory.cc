#include "worker/model/held_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "common/status_macros.h"

namespace dtrain::model {
namespace {

absl::Status ErrnoError(int err, absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

}  // namespace

bool IsPlainFileName(absl::string_view name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         name.find('/') == absl::string_view::npos && name.find('\0') == absl::string_view::npos;
}

std::string QuoteBytes(absl::string_view text) {
  constexpr size_t kShown = 200;
  std::string out = absl::CHexEscape(text.substr(0, kShown));
  if (text.size() > kShown) absl::StrAppend(&out, "...");
  return out;
}

HeldDirectory::Fd::~Fd() {
  if (fd >= 0) close(fd);
}

absl::StatusOr<HeldDirectory> HeldDirectory::Open(const std::string& path) {
  const std::string absolute = AbsolutePath(path);
  char resolved[PATH_MAX];
  if (realpath(absolute.c_str(), resolved) == nullptr) {
    return ErrnoError(errno, "cannot resolve directory", absolute);
  }
  const int fd = open(resolved, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOTDIR || errno == ELOOP) {
      return absl::InvalidArgumentError(absl::StrCat(absolute, " is not a directory"));
    }
    return ErrnoError(errno, "cannot open directory", absolute);
  }
  return HeldDirectory(absolute, fd);
}

absl::StatusOr<HeldDirectory> HeldDirectory::Create(const std::string& path) {
  RETURN_IF_ERROR(MakeDirectories(AbsolutePath(path)));
  return Open(path);
}

std::string HeldDirectory::PathOf(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

absl::Status HeldDirectory::CheckName(absl::string_view name) const {
  if (IsPlainFileName(name)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("\"", QuoteBytes(name), "\" is not a plain file name in ", path_,
                   " (a checkpoint names only files of its own directory: no '/', '.' or '..')"));
}

absl::StatusOr<HeldDirectory> HeldDirectory::OpenSubdirectory(absl::string_view name) const {
  RETURN_IF_ERROR(CheckName(name));
  const std::string path = PathOf(name);
  const int fd =
      openat(fd_->fd, std::string(name).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOTDIR || errno == ELOOP) {
      return absl::InvalidArgumentError(
          absl::StrCat(path,
                       KindOf(name) == Kind::kOther ? " is a symbolic link or special file"
                                                    : " is not a directory",
                       ", not a checkpoint directory (never followed)"));
    }
    return ErrnoError(errno, "cannot open directory", path);
  }
  return HeldDirectory(path, fd);
}

absl::Status HeldDirectory::CreateError(int err, absl::string_view what,
                                        const std::string& path) const {
  struct stat st;
  if (err == ENOENT && fstat(fd_->fd, &st) == 0 && st.st_nlink == 0) {
    // Held by its descriptor, it was unlinked under us: say so rather than "no such file".
    return absl::NotFoundError(
        absl::StrCat(what, " ", path, ": ", path_, " itself was removed while in use"));
  }
  return ErrnoError(err, what, path);
}

absl::StatusOr<HeldDirectory> HeldDirectory::CreateSubdirectory(absl::string_view name) const {
  RETURN_IF_ERROR(CheckName(name));
  if (mkdirat(fd_->fd, std::string(name).c_str(), 0755) != 0 && errno != EEXIST) {
    return CreateError(errno, "cannot create directory", PathOf(name));
  }
  return OpenSubdirectory(name);
}

HeldDirectory::Kind HeldDirectory::KindOf(absl::string_view name) const {
  if (!IsPlainFileName(name)) return Kind::kOther;
  struct stat st;
  if (fstatat(fd_->fd, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? Kind::kMissing : Kind::kOther;
  }
  if (S_ISREG(st.st_mode)) return Kind::kFile;
  if (S_ISDIR(st.st_mode)) return Kind::kDirectory;
  return Kind::kOther;
}

absl::StatusOr<std::vector<std::string>> HeldDirectory::Names() const {
  // fdopendir takes the descriptor it is given: a fresh one for this directory.
  const int fd = openat(fd_->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot list", path_);
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return ErrnoError(errno, "cannot list", path_);
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const absl::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<int> HeldDirectory::OpenFile(absl::string_view name, int64_t max_bytes,
                                            int64_t* size) const {
  RETURN_IF_ERROR(CheckName(name));
  const std::string path = PathOf(name);
  const int fd = openat(fd_->fd, std::string(name).c_str(), kOpenToInspect | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ELOOP) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is a symbolic link, which a checkpoint never follows"));
    }
    return ErrnoError(errno, "cannot open", path);
  }
  struct stat st;
  if (absl::Status regular = RequireRegularFile(fd, path, &st); !regular.ok()) {
    close(fd);
    return regular;
  }
  if (max_bytes >= 0 && st.st_size > max_bytes) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " holds ", int64_t{st.st_size},
                                                   " bytes, more than the ", max_bytes,
                                                   " expected: refused unread"));
  }
  if (size != nullptr) *size = st.st_size;
  return fd;
}

absl::StatusOr<std::string> HeldDirectory::ReadFile(absl::string_view name,
                                                    int64_t max_bytes) const {
  int64_t size = 0;
  ASSIGN_OR_RETURN(const int fd, OpenFile(name, max_bytes, &size));
  std::string bytes(static_cast<size_t>(size), '\0');
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = read(fd, bytes.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      close(fd);
      return ErrnoError(err, "cannot read", PathOf(name));
    }
    done += n;
  }
  close(fd);
  return bytes;
}

absl::Status HeldDirectory::WriteFileAtomically(absl::string_view name,
                                                absl::string_view contents) const {
  RETURN_IF_ERROR(CheckName(name));
  const std::string target(name);
  const std::string temp = absl::StrCat(target, ".tmp.", getpid());
  const int fd =
      openat(fd_->fd, temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return CreateError(errno, "cannot create", PathOf(temp));
  auto fail = [&](int err, absl::string_view what) {
    close(fd);
    unlinkat(fd_->fd, temp.c_str(), 0);
    return ErrnoError(err, what, PathOf(temp));
  };
  while (!contents.empty()) {
    const ssize_t n = write(fd, contents.data(), contents.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno, "cannot write");
    contents.remove_prefix(static_cast<size_t>(n));
  }
  if (fsync(fd) != 0) return fail(errno, "cannot fsync");
  if (close(fd) != 0) {
    const int err = errno;
    unlinkat(fd_->fd, temp.c_str(), 0);
    return ErrnoError(err, "cannot close", PathOf(temp));
  }
  if (renameat(fd_->fd, temp.c_str(), fd_->fd, target.c_str()) != 0) {
    const int err = errno;
    unlinkat(fd_->fd, temp.c_str(), 0);
    return ErrnoError(err, absl::StrCat("cannot rename ", PathOf(temp), " to"), PathOf(target));
  }
  if (fsync(fd_->fd) != 0) return ErrnoError(errno, "cannot fsync directory", path_);
  return absl::OkStatus();
}

absl::Status HeldDirectory::Rename(absl::string_view from, absl::string_view to) const {
  RETURN_IF_ERROR(CheckName(from));
  RETURN_IF_ERROR(CheckName(to));
  if (renameat(fd_->fd, std::string(from).c_str(), fd_->fd, std::string(to).c_str()) != 0) {
    return ErrnoError(errno, absl::StrCat("cannot rename ", PathOf(from), " to"), PathOf(to));
  }
  return absl::OkStatus();
}

absl::Status HeldDirectory::Remove(absl::string_view name) const {
  RETURN_IF_ERROR(CheckName(name));
  const std::string n(name);
  if (KindOf(name) == Kind::kDirectory) {
    ASSIGN_OR_RETURN(HeldDirectory sub, OpenSubdirectory(name));
    ASSIGN_OR_RETURN(std::vector<std::string> names, sub.Names());
    for (const std::string& inner : names) RETURN_IF_ERROR(sub.Remove(inner));
    if (unlinkat(fd_->fd, n.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      return ErrnoError(errno, "cannot remove directory", PathOf(name));
    }
    return absl::OkStatus();
  }
  if (unlinkat(fd_->fd, n.c_str(), 0) != 0 && errno != ENOENT) {
    return ErrnoError(errno, "cannot remove", PathOf(name));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::model
