#include "worker/comm/observed_transport.h"

namespace dtrain::comm {

absl::StatusOr<SendHandle> ObservedTransport::StartSend(int peer, const MessageKey& key,
                                                        const TensorMeta& meta,
                                                        absl::Span<const std::byte> data,
                                                        absl::Time deadline) {
  absl::StatusOr<SendHandle> handle = inner_->StartSend(peer, key, meta, data, deadline);
  if (handle.ok()) observer_->OnSent(peer, key.kind, static_cast<int64_t>(data.size()));
  return handle;
}

absl::Status ObservedTransport::Recv(int peer, const MessageKey& key, const TensorMeta& expected,
                                     PieceSink sink, absl::Time deadline,
                                     const RecvOptions& options) {
  absl::Status s = inner_->Recv(peer, key, expected, sink, deadline, options);
  if (s.ok()) observer_->OnReceived(peer, key.kind, expected.num_bytes());
  return s;
}

}  // namespace dtrain::comm
