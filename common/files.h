// Whole-file reads and crash-safe whole-file writes: the one implementation of "temp file,
// fsync, rename, fsync the directory" that every writer of checkpoints, exports, `latest` and
// manifests uses.
//
//   ASSIGN_OR_RETURN(std::string bytes, ReadFileToString("model.safetensors"));
//   RETURN_IF_ERROR(WriteFileAtomically("DIR/latest", "step_00000040\n"));
//
//   ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Create("ckpt.safetensors"));
//   RETURN_IF_ERROR(w.Append(header));
//   RETURN_IF_ERROR(w.Commit());   // fsync, rename over the target, fsync the directory
//
// Errors are absl::Status with the errno mapped to a code by absl::ErrnoToStatus (ENOENT ->
// NotFound, EACCES -> PermissionDenied, ...) and a message "<what> <path>: <strerror>", the
// style of MakeDirectories (common/job_paths.h) too.
#ifndef DTRAIN_COMMON_FILES_H_
#define DTRAIN_COMMON_FILES_H_

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain {

// Reads the whole of `path` (a regular file) into a string. InvalidArgument naming the path
// for a directory or other non-regular file (a FIFO is refused at once, not waited on).
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Opening to read a path that may name something other than a regular file (a path a job or a
// checkpoint names): open(2) of a FIFO with no writer would wait forever and a device would be
// read forever, so the file is opened with kOpenToInspect (O_NONBLOCK: a FIFO opens at once)
// and then RequireRegularFile checks it is a regular file and makes reads blocking again.
// OpenRegularFile does both for a path; openat(2) callers (HeldDirectory) use the two parts.
inline constexpr int kOpenToInspect = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
// fstat of `fd` into *st; InvalidArgument "<path> is a FIFO, not a regular file" (a directory,
// a device, a socket) unless it is one; then O_NONBLOCK is cleared. The caller closes `fd`.
absl::Status RequireRegularFile(int fd, const std::string& path, struct stat* st);
// A descriptor of regular file `path` open for reading (blocking), its fstat in *st; the caller
// closes it. "cannot open <path>: ..." with errno's code (NotFound for ENOENT), or
// RequireRegularFile's InvalidArgument.
absl::StatusOr<int> OpenRegularFile(const std::string& path, struct stat* st);

// A regular file mapped read-only (mmap, MAP_PRIVATE): its bytes are the page cache's, shared
// by every process that maps it and dropped by the kernel under pressure, so a dataset larger
// than memory can be read and the workers on one host hold one copy. The file must not be
// truncated while mapped (reading past its new end is SIGBUS): datasets are written once.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<const MappedFile> f, MappedFile::Open("tokens.bin"));
//   f->bytes();  // absl::string_view of the whole file
class MappedFile {
 public:
  // Errors as ReadFileToString: NotFound, InvalidArgument for what is not a regular file.
  static absl::StatusOr<std::unique_ptr<const MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::string_view bytes() const { return {data_, size_}; }
  // Tells the kernel how the mapping will be read (MADV_SEQUENTIAL, MADV_RANDOM); a hint.
  void Advise(int advice) const;

 private:
  MappedFile(const char* data, size_t size) : data_(data), size_(size) {}
  const char* const data_;  // null for an empty file
  const size_t size_;
};

// The bytes of the regular files under directory `dir`, recursively (symlinks not followed);
// what vanishes while it counts is skipped. 0 for a missing directory.
int64_t DirectoryBytes(const std::string& dir);

// Writes `contents` so that `path` holds either its old contents or all the new ones
// (AtomicFileWriter). On any error `path` is untouched and no temp file is left.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// Writes a file so that `path` holds either its old contents or the complete new ones, never a
// half-written file: data goes to "<path>.tmp.<pid>", Commit() fsyncs it, renames it over `path`
// and fsyncs the directory. A writer destroyed without a successful Commit() removes its temp
// file. Move-only.
class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> Create(const std::string& path);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  absl::Status Append(absl::string_view bytes);
  // Writes over bytes already appended, at `offset` (a header whose counts are known only at
  // the end); the file's end does not move when they lie within it.
  absl::Status OverwriteAt(int64_t offset, absl::string_view bytes);
  absl::Status Commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  void Abandon();  // closes and unlinks the temp file, if still open

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;  // -1 once committed or abandoned
};

}  // namespace dtrain

#endif  // DTRAIN_COMMON_FILES_H_
