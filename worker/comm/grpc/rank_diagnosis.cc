#include "worker/comm/grpc/rank_diagnosis.h"

#include <vector>

#include "absl/time/clock.h"

namespace dtrain::comm {
namespace {

FlightEntry::Op OpOf(FlightOp op) {
  switch (op) {
    case FlightOp::kForward:
      return FlightEntry::FORWARD;
    case FlightOp::kBackwardInput:
      return FlightEntry::BACKWARD_INPUT;
    case FlightOp::kBackwardWeight:
      return FlightEntry::BACKWARD_WEIGHT;
    case FlightOp::kSend:
      return FlightEntry::SEND;
    case FlightOp::kRecv:
      return FlightEntry::RECV;
    case FlightOp::kCollective:
      return FlightEntry::COLLECTIVE;
    case FlightOp::kCheckpoint:
      return FlightEntry::CHECKPOINT;
  }
  return FlightEntry::OP_UNSPECIFIED;
}

FlightEntry::State StateOf(FlightState state) {
  switch (state) {
    case FlightState::kQueued:
      return FlightEntry::QUEUED;
    case FlightState::kStarted:
      return FlightEntry::STARTED;
    case FlightState::kDone:
      return FlightEntry::DONE;
    case FlightState::kFailed:
      return FlightEntry::FAILED;
  }
  return FlightEntry::STATE_UNSPECIFIED;
}

}  // namespace

FlightEntry ToFlightEntry(const FlightRecord& r) {
  FlightEntry e;
  e.set_id(r.id);
  e.set_op(OpOf(r.op));
  e.set_state(StateOf(r.state));
  // MessageKind's values are proto/peer.proto's (transport.h).
  if (r.op == FlightOp::kSend || r.op == FlightOp::kRecv) {
    e.set_kind(static_cast<::dtrain::MessageKind>(static_cast<int>(r.kind)));
  }
  e.set_peer(r.peer);
  e.set_step(r.step);
  e.set_micro_batch(r.micro_batch);
  e.set_virtual_stage(r.virtual_stage);
  e.set_group(r.group);
  e.set_seq(r.seq);
  e.set_part(r.part);
  e.set_bytes(r.bytes);
  e.set_start_unix_ns(r.start_ns);
  e.set_end_unix_ns(r.end_ns);
  e.set_what(r.what);
  return e;
}

RankDiagnosis RankDiagnosisOf(const FlightRecorder& recorder, int rank) {
  const std::vector<FlightRecord> records = recorder.Snapshot();
  RankDiagnosis d;
  d.set_rank(rank);
  d.set_now_unix_ns(absl::GetCurrentTimeNanos());
  d.set_recorded(recorder.recorded());
  d.mutable_entries()->Reserve(static_cast<int>(records.size()));
  for (const FlightRecord& r : records) *d.add_entries() = ToFlightEntry(r);
  return d;
}

}  // namespace dtrain::comm
