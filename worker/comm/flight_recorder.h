// FlightRecorder: the last operations of one rank, always on, for `dtrain diagnose` (what is
// this rank doing now, since when, and what did it do just before).
//
// A bounded ring of fixed-size records (default 4096): schedule actions (F / B / W of a
// micro-batch of a virtual stage in a step), sends and receives (peer, message key, bytes),
// collectives (group, sequence number, op) and checkpoint phases, each with its state
// (started, done, failed) and its start and end times (Unix nanoseconds, this rank's clock).
// When the ring is full the oldest record is overwritten. Recording takes one short mutex and
// allocates nothing; a record whose operation ends after it was overwritten stays overwritten.
//
// Who records: whoever wraps the job's transport in an ObservedTransport with a recorder
// (observed_transport.h) gives it to everything that uses the transport
// (Transport::recorder()): the transport records sends and receives, collectives/group.cc
// each collective, parallel/stage_executor.cc each F / B / W, the trainer checkpoint phases.
//
//   FlightRecorder recorder;                       // 4096 records
//   FlightScope f(transport.recorder(), FlightRecord::Action(FlightOp::kForward, step, mb, vs));
//   absl::Status s = stage.Forward(...);
//   f.Finish(s);                                   // done or failed, with its end time
//   std::vector<FlightRecord> last = recorder.Snapshot();  // oldest first
#ifndef DTRAIN_WORKER_COMM_FLIGHT_RECORDER_H_
#define DTRAIN_WORKER_COMM_FLIGHT_RECORDER_H_

#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {

enum class FlightOp : uint8_t {
  kForward = 1,         // F of a micro-batch
  kBackwardInput = 2,   // B (input gradient; with W fused: the whole backward)
  kBackwardWeight = 3,  // W (weight gradient)
  kSend = 4,            // a message handed to the transport (instant: recorded done)
  kRecv = 5,            // a receive, from its call until its last byte
  kCollective = 6,      // one collective operation of a group
  kCheckpoint = 7,      // a checkpoint phase (what: "snapshot", "write", ...)
};

enum class FlightState : uint8_t { kQueued = 1, kStarted = 2, kDone = 3, kFailed = 4 };

// One operation. Fields an operation does not have stay at their defaults (-1 / 0 / "").
struct FlightRecord {
  uint64_t id = 0;  // 1, 2, ... in order of recording; 0: an empty slot
  FlightOp op = FlightOp::kForward;
  FlightState state = FlightState::kStarted;
  MessageKind kind = MessageKind::kActivation;  // kSend / kRecv: what the message is
  int32_t peer = -1;                            // kSend / kRecv: the other rank
  int64_t step = -1;
  int32_t micro_batch = -1;
  int32_t virtual_stage = -1;
  int32_t group = -1;  // kCollective, and collective messages
  int64_t seq = -1;    // kCollective, and collective messages
  int32_t part = -1;   // collective messages
  int64_t bytes = 0;
  int64_t start_ns = 0;  // Unix nanoseconds
  int64_t end_ns = 0;    // 0 until done or failed
  char what[32] = {};    // kCollective: "all-reduce sum of 1000 floats"; kCheckpoint: the phase

  static FlightRecord Action(FlightOp op, int64_t step, int32_t micro_batch, int32_t virtual_stage);
  // kSend or kRecv of the message `key` to / from `peer`.
  static FlightRecord Message(FlightOp op, int peer, const MessageKey& key, int64_t bytes);
  static FlightRecord Collective(int32_t group, int64_t seq, absl::string_view what);
  static FlightRecord Checkpoint(int64_t step, absl::string_view phase);

  void SetWhat(absl::string_view text);  // truncated to fit
};

class FlightRecorder {
 public:
  static constexpr int kDefaultCapacity = 4096;
  explicit FlightRecorder(int capacity = kDefaultCapacity);

  // Records `r` as started now (its id and start time set here); returns its id for End.
  uint64_t Begin(const FlightRecord& r);
  // Ends record `id` now: done, or failed. A no-op when it was overwritten meanwhile.
  void End(uint64_t id, bool ok);
  // Records `r` as done now (start = end): an instant operation such as a send handed over.
  void Instant(const FlightRecord& r);

  // Every record still in the ring, oldest first.
  std::vector<FlightRecord> Snapshot() const;
  int capacity() const { return static_cast<int>(ring_.size()); }
  // Records made since the start (more than capacity: the oldest were overwritten).
  uint64_t recorded() const;

 private:
  mutable std::mutex mu_;
  std::vector<FlightRecord> ring_;  // slot of record id: (id - 1) % capacity
  uint64_t next_id_ = 1;
};

// Begins a record on construction and ends it once: Finish(status), or failed on destruction
// without Finish (an early return). A null recorder records nothing.
class FlightScope {
 public:
  FlightScope(FlightRecorder* recorder, const FlightRecord& r)
      : recorder_(recorder), id_(recorder != nullptr ? recorder->Begin(r) : 0) {}
  ~FlightScope() {
    if (id_ != 0) recorder_->End(id_, false);
  }
  FlightScope(const FlightScope&) = delete;
  FlightScope& operator=(const FlightScope&) = delete;

  // Ends the record: done when `s` is OK, else failed. Returns `s`.
  const absl::Status& Finish(const absl::Status& s) {
    if (id_ != 0) recorder_->End(id_, s.ok());
    id_ = 0;
    return s;
  }

 private:
  FlightRecorder* recorder_;
  uint64_t id_;
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_FLIGHT_RECORDER_H_
