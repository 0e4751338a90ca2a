#include "worker/comm/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dtrain::comm {
namespace {

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", strerror(errno)); }

}  // namespace

int SweepStaleSegments(absl::Duration min_age, const std::string& folder) {
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return 0;
  int removed = 0;
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  while (dirent* e = readdir(dir)) {
    int pid = 0;
    char hex[33];
    int end = 0;
    // "dtrain-<pid>-<32 hex>": a segment's name (ShmSegment::Create).
    if (sscanf(e->d_name, "dtrain-%d-%32[0-9a-f]%n", &pid, hex, &end) != 2 ||
        e->d_name[end] != '\0' || strlen(hex) != 32 || pid <= 0) {
      continue;
    }
    struct stat st;
    const std::string path = absl::StrCat(folder, "/", e->d_name);
    if (stat(path.c_str(), &st) != 0 || st.st_uid != geteuid() ||
        now - st.st_mtime < absl::ToInt64Seconds(min_age)) {
      continue;
    }
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // its creator may still be running
    if (unlink(path.c_str()) == 0) ++removed;           // shm_unlink, for /dev/shm
  }
  closedir(dir);
  return removed;
}

std::vector<std::string> SegmentsOf(int pid) {
  std::vector<std::string> found;
  const std::string prefix = absl::StrCat("dtrain-", pid, "-");
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      if (absl::StartsWith(e->d_name, prefix)) found.push_back(e->d_name);
    }
    closedir(dir);
  }
  return found;
}

bool IsSegmentName(absl::string_view name) {
  return absl::StartsWith(name, "/dtrain-") && name.size() < 100 &&
         name.find('/', 1) == absl::string_view::npos;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::move(other.name_);
    fd_ = other.fd_;
    base_ = other.base_;
    bytes_ = other.bytes_;
    linked_ = other.linked_;
    other.fd_ = -1;
    other.base_ = nullptr;
    other.bytes_ = 0;
    other.linked_ = false;
  }
  return *this;
}

ShmSegment::~ShmSegment() { Reset(); }

void ShmSegment::Reset() {
  Unlink();
  if (base_ != nullptr) munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

void ShmSegment::Unlink() {
  if (!linked_) return;
  linked_ = false;
  shm_unlink(name_.c_str());
}

absl::StatusOr<ShmSegment> ShmSegment::Create(int64_t bytes) {
  if (bytes <= 0 || bytes % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory segment of ", bytes, " bytes: need a multiple of 4096"));
  }
  SweepStaleSegments();
  unsigned char random[16];
  if (getrandom(random, sizeof(random), 0) != sizeof(random)) {
    return absl::UnavailableError(Errno("getrandom"));
  }
  ShmSegment s;
  s.name_ = absl::StrCat(
      "/dtrain-", getpid(), "-",
      absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(random), sizeof(random))));
  s.fd_ = shm_open(s.name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (s.fd_ < 0) return absl::UnavailableError(Errno(absl::StrCat("shm_open ", s.name_)));
  s.linked_ = true;  // from here on, an error unlinks it (the destructor)
  // Reserve the pages now: a /dev/shm too small for the segment fails here, cleanly.
  if (const int err = posix_fallocate(s.fd_, 0, bytes); err != 0) {
    const std::string why =
        absl::StrCat("reserving ", bytes, " bytes in /dev/shm for ", s.name_, ": ", strerror(err));
    return err == ENOSPC ? absl::ResourceExhaustedError(why) : absl::UnavailableError(why);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd_, 0);
  if (base == MAP_FAILED) return absl::UnavailableError(Errno(absl::StrCat("mmap ", s.name_)));
  s.base_ = base;
  s.bytes_ = bytes;
  return s;
}

absl::StatusOr<ShmSegment> ShmSegment::Attach(const std::string& name, int64_t min_bytes) {
  if (!IsSegmentName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a dtrain segment's name"));
  }
  ShmSegment s;
  s.name_ = name;
  s.fd_ = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (s.fd_ < 0) {
    const std::string why = Errno(absl::StrCat("shm_open ", name));
    return errno == ENOENT ? absl::NotFoundError(why) : absl::UnavailableError(why);
  }
  struct stat st;
  if (fstat(s.fd_, &st) != 0) return absl::UnavailableError(Errno(absl::StrCat("fstat ", name)));
  if (st.st_size < min_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is too small (", st.st_size, " bytes, need ", min_bytes, ")"));
  }
  void* base = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd_, 0);
  if (base == MAP_FAILED) return absl::UnavailableError(Errno(absl::StrCat("mmap ", name)));
  s.base_ = base;
  s.bytes_ = st.st_size;
  return s;
}

namespace shm {

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return;
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace shm
}  // namespace dtrain::comm
