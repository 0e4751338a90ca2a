#include "worker/comm/observed_transport.h"

namespace dtrain::comm {

absl::StatusOr<SendHandle> ObservedTransport::StartSend(int peer, const MessageKey& key,
                                                        const TensorMeta& meta,
                                                        absl::Span<const std::byte> data,
                                                        absl::Time deadline) {
  absl::StatusOr<SendHandle> handle = inner_->StartSend(peer, key, meta, data, deadline);
  const int64_t bytes = static_cast<int64_t>(data.size());
  if (handle.ok() && observer_ != nullptr) observer_->OnSent(peer, key.kind, bytes);
  if (recorder_ != nullptr) {
    FlightRecord r = FlightRecord::Message(FlightOp::kSend, peer, key, bytes);
    if (handle.ok()) {
      recorder_->Instant(r);
    } else {
      recorder_->End(recorder_->Begin(r), false);
    }
  }
  return handle;
}

absl::Status ObservedTransport::Recv(int peer, const MessageKey& key, const TensorMeta& expected,
                                     PieceSink sink, absl::Time deadline,
                                     const RecvOptions& options) {
  const int64_t bytes = expected.num_bytes();
  FlightScope recorded(recorder_, FlightRecord::Message(FlightOp::kRecv, peer, key, bytes));
  absl::Status s = inner_->Recv(peer, key, expected, sink, deadline, options);
  if (s.ok() && observer_ != nullptr) observer_->OnReceived(peer, key.kind, bytes);
  return recorded.Finish(s);
}

}  // namespace dtrain::comm
