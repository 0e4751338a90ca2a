// Host-local all-reduce over shared buffers: when every member of a group is on one host, the
// members' all-reduce buffers live in one shared-memory segment that every member maps, and the
// all-reduce reads the peers' data where it lies (zero-copy) instead of copying it through the
// per-pair rings (grpc/shm_link.h) chunk by chunk.
//
// The algorithm (n members, buffers B_0..B_{n-1}, each cut into n segments by RingSegment):
//   barrier 1  every member's data is in its buffer;
//   phase 1    member r reduces segment r of all n buffers into B_r's segment r, reading the
//              peers' segment r straight from their buffers (reduce-scatter without messages);
//   phase 2    member r copies its final segment r into every peer's buffer (all-gather); only
//              member r ever touches segment r of a buffer during the op, so no barrier
//              separates the phases;
//   barrier 2  every buffer holds every segment, and nobody touches another member's buffer
//              any more: the caller may write its own again.
// Per member, for S bytes: S read (its segment of every buffer) and S written (its segment, then
// its copies, pushed block by block from cache), against about 3 S of copies through the rings; no message, no thread hand-over (docs/PERFORMANCE.md "Same-host
// data path"). Each element is reduced by one member only, so every member ends with the same
// bits; in another order than the ring's (equal results whenever the reduction is exact).
//
// Barriers are a counter per member and one futex word in the segment's control page: a short
// spin, then a futex sleep that wakes every few milliseconds to look at the deadline (the
// group's timeout from the op's start) and at the transport's view of the members not arrived
// yet (a member whose stream broke: Unavailable naming it; one that gave up, AbortJob: Aborted
// with its error). The member that sees a failure records it in the control page, so every
// other member fails at once (Aborted) naming the same member; the buffers then stay failed
// (the step fails and the job restarts, as with the ring).
//
// Set-up (Create, a collective of the group), around the ring so that each member talks only to
// its ring neighbours (the peers a worker is told about): member 0 creates the segment
// (shm/segment.h: a random name, mode 0600) and passes its name to member 1 over the transport
// (mutual TLS, after the job's secret); each member maps it and passes on the name and the
// random nonce it read there, which proves it mapped this very segment, on this host; the last
// hands the nonce back to member 0, which unlinks the name (nothing stays in /dev/shm) and sends
// the verdict around. If any member could not map it (another host, a /dev/shm of its own, no
// room), nobody uses it: Run is the ring, and why_not() says why.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> ar, SharedAllReduce::Create(&group, n));
//   absl::Span<float> grads = ar->buffer().subspan(0, n);   // empty when !ar->shared()
//   ... write this member's values into grads ...
//   RETURN_IF_ERROR(ar->Run(grads, ReduceOp::kSum));
//
// Every member must call Run with spans at the same offset and of the same length, in its
// buffer on every member or on none (InvalidArgument when members disagree). A span outside the
// buffer goes through the ring (AllReduce). Used by one thread at a time, like its group.
#ifndef DTRAIN_WORKER_COMM_COLLECTIVES_ALLREDUCE_SHARED_H_
#define DTRAIN_WORKER_COMM_COLLECTIVES_ALLREDUCE_SHARED_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/comm/collectives/group.h"
#include "worker/comm/reduce.h"
#include "worker/comm/shm/segment.h"

namespace dtrain::comm {

class SharedAllReduce {
 public:
  struct Control;  // the segment's control page (allreduce_shared.cc)

  // A collective of `group` (every member calls it, in the same order as the group's other
  // collectives): buffers of `capacity_floats` (> 0) for every member in one shared segment,
  // when every member can map it. Transport errors as any collective's; a segment that cannot be
  // shared is not an error (shared() is false). A 1-member group shares nothing.
  static absl::StatusOr<std::unique_ptr<SharedAllReduce>> Create(Group* group,
                                                                 int64_t capacity_floats);

  // Whether the members share buffers (Run is zero-copy on spans inside buffer()).
  bool shared() const { return control_ != nullptr; }
  // Why not (for the worker's log), empty when shared.
  const std::string& why_not() const { return why_not_; }
  // This member's buffer in the shared segment (capacity_floats), empty when not shared.
  absl::Span<float> buffer() const { return mine_; }

  // Every member ends with op(x_0, ..., x_{n-1}) in `data`, in place. Inside buffer(): the
  // algorithm above; elsewhere, the ring. Errors as AllReduce's.
  absl::Status Run(absl::Span<float> data, ReduceOp op);

 private:
  SharedAllReduce() = default;
  float* BufferOf(int member) const;
  // Barrier number `k` (counted from 1): arrives, then waits for every member.
  absl::Status Barrier(uint64_t k, CollectiveOp& op);
  // The transport's news of `member`: its stream broke, it left, or it gave up (AbortJob).
  absl::Status MemberFailure(int member) const;
  // The failure recorded in the control page, if any (Aborted naming the member).
  absl::Status RecordedFailure() const;
  // Records that `member` failed the group's collectives (first one wins) and wakes everyone.
  void RecordFailure(int member);

  Group* group_ = nullptr;
  ShmSegment segment_;
  Control* control_ = nullptr;
  int64_t capacity_ = 0;  // floats per buffer
  int64_t stride_ = 0;    // floats from one buffer to the next
  absl::Span<float> mine_;
  uint64_t barriers_ = 0;  // barriers this member passed
  std::string why_not_;
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_COLLECTIVES_ALLREDUCE_SHARED_H_
