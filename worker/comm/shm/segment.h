// ShmSegment: a POSIX shared-memory segment (/dev/shm) that ranks of one host map, and the
// futex waits on words inside such a segment. Shared by the per-pair rings (ring.h) and the
// host-local all-reduce buffers (collectives/allreduce_shared.h), so that both name, create,
// protect and clean up their segments by one rule:
//
//  * a fresh random name, "/dtrain-<creator pid>-<32 hex>" (128 random bits: names of two jobs,
//    or of two segments of one job, do not collide), created O_EXCL with mode 0600: only
//    processes of the creator's uid can open it, and only by that name, which the creator tells
//    peers over the mutual-TLS stream after they presented the job's secret;
//  * its pages reserved at once (posix_fallocate), so a full /dev/shm is an error now, not a
//    SIGBUS later;
//  * the name unlinked as soon as every peer mapped it (the callers' handshakes), so nothing
//    stays in /dev/shm after the job, or after a kill -9 of any process: the mappings live on
//    in the processes that hold them and go with the last of them;
//  * a process killed inside a handshake (after creating, before the unlink) leaves its file:
//    SweepStaleSegments, called by every Create, removes it later.
//
//   ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::Create(1 << 20));
//   // ... tell peers segment.name() over the authenticated stream; they Attach it ...
//   segment.Unlink();
#ifndef DTRAIN_WORKER_COMM_SHM_SEGMENT_H_
#define DTRAIN_WORKER_COMM_SHM_SEGMENT_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dtrain::comm {

// Removes segments that outlived their creator: names of segments ("/dtrain-<pid>-<hex>"), of
// this uid, at least `min_age` old (longer than any handshake), whose creator's pid is gone (in a
// shared /dev/shm with another pid namespace a pid may look gone while its process runs: min_age
// keeps such a segment safe during its handshake). ShmSegment::Create calls it. Returns how many
// it removed. `dir` is /dev/shm but in tests, which sweep a folder of their own: every process
// that creates a segment sweeps /dev/shm, so a test's planted files there are not its alone.
int SweepStaleSegments(absl::Duration min_age = absl::Minutes(5),
                       const std::string& dir = "/dev/shm");

// The names (without the leading slash) of the segments in /dev/shm that process `pid` created
// and that are still there: what a test asserts empty once a job is over.
std::vector<std::string> SegmentsOf(int pid);

// Whether `name` has the form of our segments' names ("/dtrain-..." with no other slash): a name
// a peer sends is opened only then, so a peer cannot make a rank map anything else.
bool IsSegmentName(absl::string_view name);

class ShmSegment {
 public:
  // A new segment of `bytes` (> 0, a multiple of 4096), zero-filled. ResourceExhausted when
  // /dev/shm has no room; Unavailable when it cannot be used.
  static absl::StatusOr<ShmSegment> Create(int64_t bytes);
  // Maps the whole segment `name`. NotFound: no such segment here (another host, or another
  // /dev/shm); InvalidArgument: not a name of ours (IsSegmentName), or smaller than `min_bytes`.
  static absl::StatusOr<ShmSegment> Attach(const std::string& name, int64_t min_bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ~ShmSegment();  // unmaps; unlinks the name if still linked and this side created it

  const std::string& name() const { return name_; }
  void* base() const { return base_; }
  int64_t bytes() const { return bytes_; }
  // Removes the name from /dev/shm (every mapping stays valid). Idempotent.
  void Unlink();

 private:
  void Reset();
  std::string name_;
  int fd_ = -1;
  void* base_ = nullptr;
  int64_t bytes_ = 0;
  bool linked_ = false;  // this side created the name and has not unlinked it
};

// Futex waits on a word of a shared mapping (shared, not process-private, futexes).
namespace shm {
// Sleeps while *word == seen, at most `timeout`.
void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, absl::Duration timeout);
void FutexWakeAll(std::atomic<uint32_t>* word);
// A pause inside a spin loop.
inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
}  // namespace shm

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_SHM_SEGMENT_H_
