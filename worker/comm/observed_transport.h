// ObservedTransport: a Transport that forwards to another and tells an observer how many bytes
// each message carried, per peer and kind — what the worker's bytes-sent/received metrics
// count. Counting happens at the interface (a send when it starts, a receive when it
// completes), so both transports are counted the same way. With a flight recorder it also
// records every send (done when handed over) and receive (started at the call, done or failed
// at its end), and gives the recorder to everything above (Transport::recorder()).
//
//   ObservedTransport observed(grpc_transport.get(), &metrics, &recorder);
//   ASSIGN_OR_RETURN(auto trainer, ParallelTrainer::Create(backend, &observed, options));
#ifndef DTRAIN_WORKER_COMM_OBSERVED_TRANSPORT_H_
#define DTRAIN_WORKER_COMM_OBSERVED_TRANSPORT_H_

#include <cstdint>
#include <string>

#include "worker/comm/flight_recorder.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {

class TransportObserver {
 public:
  virtual ~TransportObserver() = default;
  // Called on the calling thread; must be cheap and thread-safe.
  virtual void OnSent(int peer, MessageKind kind, int64_t bytes) = 0;
  virtual void OnReceived(int peer, MessageKind kind, int64_t bytes) = 0;
};

class ObservedTransport final : public Transport {
 public:
  // All must outlive this object; `observer` and `recorder` may be null.
  ObservedTransport(Transport* inner, TransportObserver* observer,
                    FlightRecorder* recorder = nullptr)
      : inner_(inner), observer_(observer), recorder_(recorder) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string PeerName(int peer) const override { return inner_->PeerName(peer); }
  absl::StatusOr<SendHandle> StartSend(int peer, const MessageKey& key, const TensorMeta& meta,
                                       absl::Span<const std::byte> data,
                                       absl::Time deadline) override;
  absl::Status Post(int peer, const MessageKey& key, std::string payload) override {
    return inner_->Post(peer, key, std::move(payload));
  }
  absl::Status Recv(int peer, const MessageKey& key, const TensorMeta& expected, PieceSink sink,
                    absl::Time deadline, const RecvOptions& options = {}) override;
  bool Arrived(int peer, const MessageKey& key) override { return inner_->Arrived(peer, key); }
  absl::Status PeerStatus(int peer) const override { return inner_->PeerStatus(peer); }
  FlightRecorder* recorder() const override { return recorder_; }

 private:
  Transport* inner_;
  TransportObserver* observer_;
  FlightRecorder* recorder_;
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_OBSERVED_TRANSPORT_H_
