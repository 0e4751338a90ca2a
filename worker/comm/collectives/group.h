// Group: the ranks that run collectives together (a tensor-parallel group, a data-parallel
// group, the first/last stage pair of the tied embedding; see ../groups.h), in ring order, and
// this rank's index among them. Collectives name members by index, 0..size-1.
//
//   ASSIGN_OR_RETURN(Group tp, Group::Create(&transport, {4, 5, 6, 7}, /*id=*/1));
//   RETURN_IF_ERROR(AllReduce(tp, grads, ReduceOp::kSum));
//
// Every member must call the same collectives, with the same sizes, in the same order: each
// call takes the group's next sequence number, which is part of every message's key, so a
// member that disagrees fails with InvalidArgument instead of mixing data. A Group is used by
// one thread at a time; groups sharing a transport may run on different threads.
#ifndef DTRAIN_WORKER_COMM_COLLECTIVES_GROUP_H_
#define DTRAIN_WORKER_COMM_COLLECTIVES_GROUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/comm/flight_recorder.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {

struct CollectiveOptions {
  // Each collective's waits share one deadline: its start plus this.
  absl::Duration timeout = absl::Seconds(60);
  // Largest message of a pipelined collective (smaller when a segment is small, so the
  // pipeline still has several chunks).
  int64_t chunk_bytes = 1 << 20;
  // Test-only fault injection (dtrain-worker --test_only_skip_collective): this member skips
  // sequence number N, so its N-th collective and every later one carry a number one ahead of
  // its partners': they wait for messages it never sends, and `dtrain diagnose` reports the
  // sequence mismatch. -1 (the default): off.
  int64_t test_only_skip_seq = -1;
};

class Group {
 public:
  // `ranks`: distinct ranks of `transport`'s job, in ring order, including transport->rank().
  // `id` must be the same on every member and differ between groups that share a pair of
  // ranks. InvalidArgument otherwise.
  static absl::StatusOr<Group> Create(Transport* transport, std::vector<int> ranks, int32_t id,
                                      CollectiveOptions options = {});

  Transport& transport() const { return *transport_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  int index() const { return index_; }
  int rank_at(int index) const { return ranks_[index]; }
  absl::Span<const int> ranks() const { return ranks_; }
  int32_t id() const { return id_; }
  const CollectiveOptions& options() const { return options_; }
  // "group 7 (ranks 0,1,2,3)".
  std::string Describe() const;

  int64_t NextSeq() {
    if (next_seq_ == options_.test_only_skip_seq) ++next_seq_;
    return next_seq_++;
  }

 private:
  Group() = default;
  Transport* transport_ = nullptr;
  std::vector<int> ranks_;
  int index_ = 0;
  int32_t id_ = 0;
  CollectiveOptions options_;
  int64_t next_seq_ = 0;
};

// One collective in progress: its sequence number, its deadline, and the context its errors
// carry ("all-reduce sum of 1000 floats in group 7 (ranks 0,1,2,3), op 12: receiving ...").
// Recorded in the transport's flight recorder, if any, from construction to Finish.
class CollectiveOp {
 public:
  CollectiveOp(Group& group, std::string description);

  Group& group() { return group_; }
  absl::Time deadline() const { return deadline_; }

  // Message `part` of this op to / from the member at `index`, as `count` floats.
  absl::StatusOr<SendHandle> Send(int index, int32_t part, absl::Span<const float> data);
  absl::Status Recv(int index, int32_t part, int64_t count, PieceSink sink);
  absl::Status Wait(SendHandle& send);

  // `status` with the op's context prepended.
  absl::Status Fail(const absl::Status& status) const;
  // Ends the op with `status`. On an error, tells every member this op has sent to (they may be
  // waiting for more from us) that it gave up, so they fail at once with Aborted and this
  // error's text instead of at their deadline. Call it while the op's sends are still pending
  // (before their handles are destroyed, which withdraws them in-process), so the abort is
  // seen before a gap in the stream. Only the first call posts.
  absl::Status Finish(absl::Status status);

 private:
  Group& group_;
  std::vector<bool> sent_to_;  // by member index
  bool aborted_ = false;
  const int64_t seq_;
  const absl::Time deadline_;
  const std::string description_;
  FlightScope recorded_;  // after seq_ and description_, which it records
};

// Segment `i` of `count` elements cut into `n` near-equal segments: the first count % n hold
// one element more. Ring collectives and ZeRO-style sharding use the same cut.
struct Segment {
  int64_t begin = 0;
  int64_t size = 0;
};
Segment RingSegment(int64_t count, int n, int i);

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_COLLECTIVES_GROUP_H_
