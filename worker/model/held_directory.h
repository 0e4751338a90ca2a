// Checkpoint files opened only where they are meant to be: a directory is resolved once and held
// open, and every name below it is a plain file name opened relative to that descriptor with
// O_NOFOLLOW. Renaming the directory, or replacing it or anything inside it with a symbolic
// link, cannot send a later read or write anywhere else (docs/SECURITY.md, "Shared checkpoint
// directories").
//
//   ASSIGN_OR_RETURN(HeldDirectory job, HeldDirectory::Open("/ckpt/job-000003"));
//   ASSIGN_OR_RETURN(HeldDirectory step, job.OpenSubdirectory("step_00000040"));
//   ASSIGN_OR_RETURN(std::string json, step.ReadFile("manifest.json", kMaxManifestBytes));
//   RETURN_IF_ERROR(job.WriteFileAtomically("latest", "step_00000040\n"));
//
// Errors name the file by the path the directory was opened as ("/ckpt/job-000003/latest"):
// InvalidArgument for a name that is not a plain file name ("../../etc/shadow"), a symbolic
// link or a file of another kind where a regular file or directory is expected, or a file
// larger than its caller allows (refused before anything is read); NotFound when missing; the
// errno's status otherwise.
#ifndef DTRAIN_WORKER_MODEL_HELD_DIRECTORY_H_
#define DTRAIN_WORKER_MODEL_HELD_DIRECTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::model {

// True for a name that stays inside the directory it is looked up in: not empty, at most 255
// bytes, no '/' or NUL, not "." or "..". The one rule for manifest entry names and `latest`.
bool IsPlainFileName(absl::string_view name);

// `text` as printable ASCII (C escapes for anything else, at most 200 bytes shown): how bytes
// read from a checkpoint file are quoted in messages, which must stay valid UTF-8.
std::string QuoteBytes(absl::string_view text);

class HeldDirectory {
 public:
  enum class Kind { kMissing, kFile, kDirectory, kOther };  // kOther: a symlink, fifo, ...

  // Resolves `path` once (its symlinks, as the roots check did) and opens the result
  // (O_DIRECTORY | O_NOFOLLOW). NotFound when it does not exist. `path` is kept for messages.
  static absl::StatusOr<HeldDirectory> Open(const std::string& path);

  // Creates `path` (with its parents, MakeDirectories) when missing, then Open.
  static absl::StatusOr<HeldDirectory> Create(const std::string& path);

  // Copies share the descriptor, closed with the last of them.
  const std::string& path() const { return path_; }
  int fd() const { return fd_->fd; }
  std::string PathOf(absl::string_view name) const;  // path()/name, for messages

  // The subdirectory `name` (not a symlink). NotFound when missing; InvalidArgument when it is
  // not a directory.
  absl::StatusOr<HeldDirectory> OpenSubdirectory(absl::string_view name) const;
  // Creates the subdirectory `name` when missing (mode 0755), then OpenSubdirectory.
  absl::StatusOr<HeldDirectory> CreateSubdirectory(absl::string_view name) const;

  // What `name` is, without following a symlink.
  Kind KindOf(absl::string_view name) const;
  // The names in the directory, sorted ("." and ".." left out).
  absl::StatusOr<std::vector<std::string>> Names() const;

  // Opens regular file `name` for reading (O_NOFOLLOW). With max_bytes >= 0, a file larger
  // than that is refused before anything is read. `size` gets its size. The caller closes.
  absl::StatusOr<int> OpenFile(absl::string_view name, int64_t max_bytes = -1,
                               int64_t* size = nullptr) const;
  // The whole of regular file `name`, refused unread when larger than `max_bytes`.
  absl::StatusOr<std::string> ReadFile(absl::string_view name, int64_t max_bytes) const;

  // `name` holds either its old contents or all of `contents`: "<name>.tmp.<pid>" written,
  // fsynced, renamed over `name`, the directory fsynced. On error no temp file is left.
  absl::Status WriteFileAtomically(absl::string_view name, absl::string_view contents) const;

  // Renames `from` to `to`, both in this directory.
  absl::Status Rename(absl::string_view from, absl::string_view to) const;
  // Removes file `name`, or directory `name` with everything in it (symlinks inside are
  // removed, never followed). OK when missing.
  absl::Status Remove(absl::string_view name) const;

 private:
  // ErrnoError for creating `path` in this directory; ENOENT while the directory itself has
  // been removed (no links left) says that instead.
  absl::Status CreateError(int err, absl::string_view what, const std::string& path) const;
  struct Fd {
    explicit Fd(int f) : fd(f) {}
    ~Fd();
    int fd;
  };
  HeldDirectory(std::string path, int fd) : path_(std::move(path)), fd_(std::make_shared<Fd>(fd)) {}
  absl::Status CheckName(absl::string_view name) const;

  std::string path_;
  std::shared_ptr<Fd> fd_;  // shared by copies: closed with the last one
};

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_HELD_DIRECTORY_H_
