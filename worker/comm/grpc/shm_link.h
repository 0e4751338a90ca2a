// The same-host data path of GrpcTransport: messages to a peer on this host go through a
// shared-memory ring (shm/ring.h) instead of the gRPC stream, which stays for set-up, control
// and failure detection. One ring per ordered pair of ranks, created by the receiver.
//
// Set-up (on the authenticated mutual-TLS stream, proto/peer.proto): the sender's HELLO offers
// shared memory; the receiver creates a ring (a fresh random name, mode 0600) and answers its
// name in HELLO_ACK; the sender maps it and sends SHM_ATTACHED with the nonce it read there,
// which proves that both see the same /dev/shm (the same host); the receiver checks it,
// unlinks the name (nothing stays in /dev/shm) and starts reading. A sender that cannot map it
// sends SHM_ATTACHED without a nonce and keeps using the stream (the fallback).
//
// ShmSender: a thread that copies queued messages into the ring, frame by frame (so a message
// larger than the ring goes through as the receiver takes it), while the caller goes on
// (sends are asynchronous, as over gRPC). A broken stream (the receiver died) fails the waiting
// and queued sends with the stream's error.
// ShmReceiver: hands each record to the peer's inbox as a frame whose pieces point into the
// ring: a receive already waiting consumes it straight from shared memory (one copy end to end);
// a frame nobody waits for yet is copied out before its ring space is released. A receive from
// the peer consumes the ring itself, on its own thread (Pump): the record goes from the ring
// into the destination (reduced on the way) with no other thread woken. A reader thread takes
// the ring over once no receive from the peer has been in progress for 5 ms, so the sender never
// waits for a receive that is not posted yet (messages nobody receives still leave the ring).
#ifndef DTRAIN_WORKER_COMM_GRPC_SHM_LINK_H_
#define DTRAIN_WORKER_COMM_GRPC_SHM_LINK_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/grpc/outgoing_stream.h"
#include "worker/comm/inbox.h"
#include "worker/comm/shm/ring.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {

// Where a rank's messages to one peer go.
enum class DataPath {
  kNone,          // nothing sent to that peer yet
  kGrpc,          // the gRPC stream (another host, or no shared /dev/shm)
  kSharedMemory,  // a shared-memory ring (same host, proved by the handshake)
  kTlsSockets,    // data connections of the transport's own, TLS 1.3 with a PSK (grpc/tls_link.h)
};
const char* DataPathName(DataPath path);

// The data path set up with one peer, in one direction (GrpcTransportOptions::on_data_path).
struct DataPathEvent {
  int peer = -1;
  bool incoming = false;  // the peer sends to this rank
  DataPath path = DataPath::kNone;
  std::string why;  // kGrpc although shared memory or data connections were wanted: why
};

// What one send through a link of the transport's own (a shared-memory ring, data
// connections: grpc/tls_link.h) is waiting for.
struct LinkSendState {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::atomic<bool> cancelled{false};  // the sender gave up (deadline): stop copying

  void Finish(const absl::Status& s) {
    absl::MutexLock lock(&mu);
    done = true;
    status = s;
  }
};

class ShmSender {
 public:
  // `stream` (the peer's control stream) must outlive this object.
  ShmSender(std::unique_ptr<ShmRing> ring, OutgoingStream* stream);
  ~ShmSender();  // Stop()

  // Queues `data` (read until the returned state is done) or, when `owned` is not empty, its
  // own copy of a small payload. The sender thread writes frames of at most the ring's limit.
  std::shared_ptr<LinkSendState> Enqueue(const MessageKey& key, const TensorMeta& meta,
                                         absl::Span<const std::byte> data, std::string owned);
  // Waits until every queued message was written and the receiver took it from the ring (true),
  // or `deadline`: a clean leave must not half-close the stream before its data was received.
  bool Drain(absl::Time deadline);
  // Fails what is still queued (Cancelled) and stops the thread.
  void Stop();

 private:
  struct Job {
    MessageKey key;
    TensorMeta meta;
    absl::Span<const std::byte> data;
    std::string owned;
    std::shared_ptr<LinkSendState> state;
  };
  static absl::Span<const std::byte> Bytes(const Job& job);  // data, or the owned copy
  void Run();
  absl::Status Write(const Job& job);

  std::unique_ptr<ShmRing> ring_;
  OutgoingStream* stream_;
  absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a thread writes into the ring
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_{false};  // stop_, for the writer's waits
  std::thread thread_;
};

class ShmReceiver {
 public:
  // `inbox` must outlive this object. The ring's name should already be unlinked.
  ShmReceiver(std::unique_ptr<ShmRing> ring, Inbox* inbox);
  ~ShmReceiver();  // Stop()
  // Stops the reader thread; later Pumps return at once.
  void Stop();

  // A receive from the peer begins / ends: while any is in progress the reader thread leaves
  // the ring to them (and for 5 ms after the last one).
  void ReceiveBegins();
  void ReceiveEnds();
  // Consumes the ring on the calling thread (a receive waiting on the inbox, Inbox::Receive's
  // `pump`, between ReceiveBegins and ReceiveEnds) until it delivered one record or `until`: a
  // record the waiting receive takes goes to its sink here, straight from the ring.
  void Pump(absl::Time until);

 private:
  void Run();
  // Hands one record to the inbox (then releases it); false when the ring is corrupt (the inbox
  // failed: nothing more from the peer can be trusted).
  bool DeliverRecord(const ShmRing::Record& record);
  // The peer writes garbage: nothing more from it can be trusted (the inbox fails).
  void Corrupt(const absl::Status& why);
  // Whether the reader thread should leave the ring to receives now.
  bool ReaderYields() const;

  std::unique_ptr<ShmRing> ring_;
  Inbox* inbox_;
  absl::Mutex consumer_mu_;        // held by the ring's one consumer: the reader or a Pump
  std::atomic<int> receiving_{0};  // receives in progress (ReceiveBegins - ReceiveEnds)
  std::atomic<int64_t> last_receive_ns_{0};  // absl::GetCurrentTimeNanos at the last ReceiveEnds
  std::atomic<bool> broken_{false};          // the ring is corrupt: nobody consumes it any more
  std::atomic<bool> stop_{false};
  absl::Mutex idle_mu_;  // the reader thread's sleep while receives pump
  absl::CondVar idle_cv_;
  std::thread thread_;
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_GRPC_SHM_LINK_H_
