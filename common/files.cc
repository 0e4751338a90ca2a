#include "common/files.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace dtrain {
namespace {

absl::Status ErrnoError(int err, absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

// The directory holding `path`, for the fsync that makes a rename durable.
std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::Status RequireRegularFile(int fd, const std::string& path, struct stat* st) {
  if (fstat(fd, st) != 0) return ErrnoError(errno, "cannot stat", path);
  if (!S_ISREG(st->st_mode)) {
    const char* kind = S_ISDIR(st->st_mode)                           ? "a directory"
                       : S_ISFIFO(st->st_mode)                        ? "a FIFO"
                       : S_ISSOCK(st->st_mode)                        ? "a socket"
                       : S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) ? "a device"
                                                                      : "not a file";
    return absl::InvalidArgumentError(absl::StrCat(path, " is ", kind, ", not a regular file"));
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return ErrnoError(errno, "cannot set blocking reads on", path);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> OpenRegularFile(const std::string& path, struct stat* st) {
  const int fd = open(path.c_str(), kOpenToInspect);
  if (fd < 0) return ErrnoError(errno, "cannot open", path);
  if (absl::Status regular = RequireRegularFile(fd, path, st); !regular.ok()) {
    close(fd);
    return regular;
  }
  return fd;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  struct stat st;
  absl::StatusOr<int> opened = OpenRegularFile(path, &st);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = read(fd, &bytes[done], bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return ErrnoError(err, "cannot read", path);
    }
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  close(fd);
  bytes.resize(done);
  return bytes;
}

absl::StatusOr<std::unique_ptr<const MappedFile>> MappedFile::Open(const std::string& path) {
  struct stat st;
  absl::StatusOr<int> opened = OpenRegularFile(path, &st);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  const size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      const int err = errno;
      close(fd);
      return ErrnoError(err, "cannot map", path);
    }
  }
  close(fd);  // the mapping keeps the file
  return std::unique_ptr<const MappedFile>(new MappedFile(static_cast<const char*>(data), size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<char*>(data_), size_);
}

void MappedFile::Advise(int advice) const {
  if (data_ != nullptr) madvise(const_cast<char*>(data_), size_, advice);
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = writer->Append(contents); !s.ok()) return s;
  return writer->Commit();
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(const std::string& path) {
  std::string temp_path = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot create", temp_path);
  return AtomicFileWriter(path, std::move(temp_path), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)), temp_path_(std::move(other.temp_path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ < 0) return;
  close(fd_);
  unlink(temp_path_.c_str());
  fd_ = -1;
}

absl::Status AtomicFileWriter::Append(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  while (!bytes.empty()) {
    ssize_t n = write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "cannot write", temp_path_);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::OverwriteAt(int64_t offset, absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  while (!bytes.empty()) {
    ssize_t n = pwrite(fd_, bytes.data(), bytes.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "cannot write", temp_path_);
    bytes.remove_prefix(static_cast<size_t>(n));
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  if (fsync(fd_) != 0) {
    absl::Status s = ErrnoError(errno, "cannot fsync", temp_path_);
    Abandon();
    return s;
  }
  int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) {
    absl::Status s = ErrnoError(errno, "cannot close", temp_path_);
    unlink(temp_path_.c_str());
    return s;
  }
  if (rename(temp_path_.c_str(), path_.c_str()) != 0) {
    absl::Status s = ErrnoError(errno, absl::StrCat("cannot rename ", temp_path_, " to"), path_);
    unlink(temp_path_.c_str());
    return s;
  }
  // The new contents are in place; fsync the directory so the rename survives a power loss.
  std::string dir = DirectoryOf(path_);
  int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoError(errno, "cannot open directory", dir);
  int rc = fsync(dir_fd);
  int err = errno;
  close(dir_fd);
  if (rc != 0) return ErrnoError(err, "cannot fsync directory", dir);
  return absl::OkStatus();
}

int64_t DirectoryBytes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  int64_t bytes = 0;
  for (fs::recursive_directory_iterator
           it(dir, fs::directory_options::skip_permission_denied, error),
       end;
       !error && it != end; it.increment(error)) {
    std::error_code file_error;
    if (it->is_regular_file(file_error)) {
      const uintmax_t size = it->file_size(file_error);
      if (!file_error) bytes += static_cast<int64_t>(size);
    }
  }
  return bytes;
}

}  // namespace dtrain
