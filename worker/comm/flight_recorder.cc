#include "worker/comm/flight_recorder.h"

#include <algorithm>
#include <cstring>

#include "absl/time/clock.h"

namespace dtrain::comm {

FlightRecord FlightRecord::Action(FlightOp op, int64_t step, int32_t micro_batch,
                                  int32_t virtual_stage) {
  FlightRecord r;
  r.op = op;
  r.step = step;
  r.micro_batch = micro_batch;
  r.virtual_stage = virtual_stage;
  return r;
}

FlightRecord FlightRecord::Message(FlightOp op, int peer, const MessageKey& key, int64_t bytes) {
  FlightRecord r;
  r.op = op;
  r.kind = key.kind;
  r.peer = peer;
  r.bytes = bytes;
  if (key.kind == MessageKind::kCollective) {
    r.group = key.group;
    r.seq = key.seq;
    r.part = key.part;
  } else {
    r.step = key.step;
    r.micro_batch = key.micro_batch;
    r.virtual_stage = key.virtual_stage;
  }
  return r;
}

FlightRecord FlightRecord::Collective(int32_t group, int64_t seq, absl::string_view what) {
  FlightRecord r;
  r.op = FlightOp::kCollective;
  r.kind = MessageKind::kCollective;
  r.group = group;
  r.seq = seq;
  r.SetWhat(what);
  return r;
}

FlightRecord FlightRecord::Checkpoint(int64_t step, absl::string_view phase) {
  FlightRecord r;
  r.op = FlightOp::kCheckpoint;
  r.step = step;
  r.SetWhat(phase);
  return r;
}

void FlightRecord::SetWhat(absl::string_view text) {
  const size_t n = std::min(text.size(), sizeof(what) - 1);
  std::memcpy(what, text.data(), n);
  what[n] = '\0';
}

FlightRecorder::FlightRecorder(int capacity) : ring_(std::max(1, capacity)) {}

uint64_t FlightRecorder::Begin(const FlightRecord& r) {
  const int64_t now = absl::GetCurrentTimeNanos();
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  FlightRecord& slot = ring_[(id - 1) % ring_.size()];
  slot = r;
  slot.id = id;
  slot.state = FlightState::kStarted;
  slot.start_ns = now;
  slot.end_ns = 0;
  return id;
}

void FlightRecorder::End(uint64_t id, bool ok) {
  const int64_t now = absl::GetCurrentTimeNanos();
  std::lock_guard<std::mutex> lock(mu_);
  FlightRecord& slot = ring_[(id - 1) % ring_.size()];
  if (slot.id != id) return;
  slot.state = ok ? FlightState::kDone : FlightState::kFailed;
  slot.end_ns = now;
}

void FlightRecorder::Instant(const FlightRecord& r) {
  const int64_t now = absl::GetCurrentTimeNanos();
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  FlightRecord& slot = ring_[(id - 1) % ring_.size()];
  slot = r;
  slot.id = id;
  slot.state = FlightState::kDone;
  slot.start_ns = now;
  slot.end_ns = now;
}

std::vector<FlightRecord> FlightRecorder::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t n = std::min<uint64_t>(next_id_ - 1, ring_.size());
  std::vector<FlightRecord> out;
  out.reserve(n);
  for (uint64_t id = next_id_ - n; id < next_id_; ++id)
    out.push_back(ring_[(id - 1) % ring_.size()]);
  return out;
}

uint64_t FlightRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_id_ - 1;
}

}  // namespace dtrain::comm
