// The cross-host data path of GrpcTransport: messages to a peer on another host go through K
// TCP connections of the transport's own (K = GrpcTransportOptions::data_connections), each a
// TLS 1.3 session of OpenSSL keyed by an external pre-shared key, instead of the gRPC stream,
// whose single TLS session encrypts a whole direction on one thread (docs/PERFORMANCE.md,
// "TLS"). The stream stays for set-up, control, GOODBYE and failure detection.
//
// Set-up (on the authenticated mutual-TLS stream, proto/peer.proto): the sender's HELLO offers
// data connections; the receiver answers in HELLO_ACK the port of its DataListener and a fresh
// random PSK (identity and key) made for this stream only; the sender (once shared memory was
// found not to be shared: grpc/shm_link.h) opens K connections to that port, each a TLS 1.3
// handshake with that PSK (TLS_AES_128_GCM_SHA256, no certificates, no tickets) followed by its
// index, and sends DATA_ATTACHED with K, or with 0 and why (then the stream carries the data:
// the fallback). A connection that does not present a registered PSK fails its handshake and is
// closed; a PSK is forgotten once the sender confirmed its connections (DATA_ATTACHED) or its
// stream ended, and admits 16 connections at most before.
//
// On a connection, inside TLS, every frame is a FramePrefix (little-endian), then the
// PeerFrameHeader of a DATA frame (grpc/frame_codec.h), then the payload. The sender numbers
// the frames to one peer 0, 1, 2, ... and sends frame s on connection s % K; a message larger
// than a part (min(frame_bytes, total / K), at least 64 KiB) becomes several frames, so its
// parts are encrypted, sent, received and decrypted on K threads at once. The receiver reads
// each connection on its own thread, into a buffer of the frame's size, and hands the frames
// to the peer's inbox in the order of their numbers: the inbox sees exactly the stream's order,
// and a receive already waiting consumes each part on the reading thread (its sink posts it
// into its range of the destination) while the other connections decrypt the next parts. A
// reader whose frame is not next holds it and reads on (two frames at most), so a reader
// thread the scheduler leaves waiting holds up the others only after that.
//
// Leaving cleanly: the sender's Drain sends TLS close_notify on every connection once its
// frames are written, and waits for the receiver's close_notify, which each reader answers
// after it delivered its connection's last frame; only then does the transport half-close the
// stream, so the receiver has every frame before it learns that nothing more comes. A
// connection that ends otherwise (the peer died, the network failed, garbage) fails the
// peer's inbox with Unavailable or DataLoss, and the sender's pending and later sends.
#ifndef DTRAIN_WORKER_COMM_GRPC_TLS_LINK_H_
#define DTRAIN_WORKER_COMM_GRPC_TLS_LINK_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/grpc/outgoing_stream.h"
#include "worker/comm/grpc/shm_link.h"
#include "worker/comm/inbox.h"
#include "worker/comm/transport.h"

typedef struct ssl_st SSL;

namespace dtrain::comm {

// The TLS 1.3 external pre-shared key of one ordered pair of ranks, made by the receiver for
// one stream and sent only on it.
struct DataPsk {
  std::string identity;  // 16 random bytes
  std::string key;       // 32 random bytes (the suite's SHA-256 length)
  // From OpenSSL's CSPRNG; Internal when it fails.
  static absl::StatusOr<DataPsk> New();
};

// One TLS session over one TCP connection (either end). Closes both on destruction.
class DataConnection {
 public:
  DataConnection(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  ~DataConnection();
  DataConnection(const DataConnection&) = delete;
  DataConnection& operator=(const DataConnection&) = delete;

  // Writes or reads exactly `n` bytes. `check` is called every 100 ms while the socket blocks
  // (a non-OK result ends the wait with it). Read: OutOfRange for the peer's close_notify
  // before the first byte (it left cleanly), Unavailable for a connection that broke. Write's
  // records wait in a write buffer and leave in large send(2) calls; the buffer is flushed
  // before Write returns unless `more` (another Write follows at once: a frame's header before
  // its payload).
  absl::Status Write(const void* data, size_t n, const std::function<absl::Status()>& check,
                     bool more = false);
  absl::Status Read(void* data, size_t n, const std::function<absl::Status()>& check);
  // Sends close_notify and waits for the peer's by `deadline` (false if it did not come).
  bool Close(absl::Time deadline);
  // Sends close_notify (the reader's answer to the sender's).
  void AnswerClose();
  // Ends the TCP connection at once (from any thread): blocked reads and writes return.
  void Abort();

 private:
  absl::Status Flush(const std::function<absl::Status()>& check);

  const int fd_;
  SSL* const ssl_;
};

class TlsReceiver;

// The receiving side's TCP listener, one per transport: accepts connections, runs each one's
// handshake (bounded: 5 s) on its thread, and hands the connections that presented a
// registered PSK to that PSK's receiver.
class DataListener {
 public:
  // `host`: where to bind, as in a gRPC listen address ("[::]", "127.0.0.1"); `port`: 0 for one
  // the kernel picks. Unavailable, naming the address, if it cannot listen (a port taken).
  static absl::StatusOr<std::unique_ptr<DataListener>> Start(const std::string& host, int port = 0);
  ~DataListener();  // Stop()
  int port() const { return port_; }
  // Connections presenting `psk` go to `receiver`, `connections` of them at most.
  void Register(const DataPsk& psk, std::shared_ptr<TlsReceiver> receiver, int connections);
  void Unregister(const std::string& identity);
  // Told every connection refused and why (a wrong PSK, a bad preamble): logs and tests.
  void set_on_refused(std::function<void(const absl::Status&)> on_refused);
  void Stop();

  // What the handshake found for a connection's PSK identity.
  struct Found {
    std::string identity;
    std::shared_ptr<TlsReceiver> receiver;
  };
  // The PSK of `identity` and its receiver, if registered (the handshake's callback).
  bool Find(const std::string& identity, std::string* key, std::shared_ptr<TlsReceiver>* receiver);

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<TlsReceiver> receiver;
    int left = 0;  // connections it still admits
  };
  DataListener(int fd, int port);
  void Run();
  absl::Status Accept(int fd);  // handshake, preamble, then to the receiver

  const int fd_;
  const int port_;
  void* ctx_ = nullptr;  // SSL_CTX
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> psks_ ABSL_GUARDED_BY(mu_);
  std::function<void(const absl::Status&)> on_refused_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Opens `count` connections to `host`:`port` with `psk` by `deadline` (all or an error:
// Unavailable naming what failed, e.g. the peer refused the handshake).
absl::StatusOr<std::vector<std::unique_ptr<DataConnection>>> ConnectData(
    const std::string& host, int port, const DataPsk& psk, int count, absl::Time deadline);

class TlsSender {
 public:
  // `stream` (the peer's control stream) must outlive this object. Frames carry at most
  // `frame_bytes` of payload.
  TlsSender(std::vector<std::unique_ptr<DataConnection>> connections, OutgoingStream* stream,
            int64_t frame_bytes);
  ~TlsSender();  // Stop()

  // As ShmSender::Enqueue: `data` is read until the returned state is done; `owned`, when not
  // empty, is the payload instead (a copy the sender keeps).
  std::shared_ptr<LinkSendState> Enqueue(const MessageKey& key, const TensorMeta& meta,
                                         absl::Span<const std::byte> data, std::string owned);
  // Waits until every frame was written, then closes every connection with close_notify and
  // waits for the receiver's answers (it delivered everything): true, or false at `deadline`.
  bool Drain(absl::Time deadline);
  // Fails what is still queued (Cancelled), ends the connections and stops the threads.
  void Stop();

 private:
  struct Message;
  struct Piece {
    std::string head;  // FramePrefix + header
    absl::Span<const std::byte> payload;
    std::shared_ptr<Message> message;
  };
  struct Lane {
    std::unique_ptr<DataConnection> connection;
    std::deque<Piece> queue;  // guarded by the sender's mu_
    bool writing = false;     // guarded by the sender's mu_
    std::thread thread;
  };
  void Run(int lane);
  // The first failure: every queued piece fails with it and the connections end.
  void Break(const absl::Status& why);
  void Finished(Message& message, const absl::Status& status);

  OutgoingStream* stream_;
  const int64_t frame_bytes_;
  absl::Mutex mu_;
  std::vector<Lane> lanes_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

class TlsReceiver {
 public:
  // `inbox` must outlive this object.
  explicit TlsReceiver(Inbox* inbox) : inbox_(inbox) {}
  ~TlsReceiver();  // Stop()
  // A connection that completed its handshake and said it is `index` of `count`: read on a
  // thread of its own from now on. InvalidArgument for an index that does not fit.
  absl::Status Add(std::unique_ptr<DataConnection> connection, int index, int count);
  // Ends the connections and stops the threads.
  void Stop();

 private:
  void Run(int index, int count, DataConnection* connection);
  absl::Status ReadFrame(DataConnection& c, uint64_t want_seq, Frame* frame);

  Inbox* inbox_;
  absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;  // connections of this peer (the first Add's count)
  std::vector<std::unique_ptr<DataConnection>> connections_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;  // the next frame to hand to the inbox
  absl::flat_hash_map<uint64_t, Frame> ready_ ABSL_GUARDED_BY(mu_);  // read ahead, by number
  std::vector<int> held_ ABSL_GUARDED_BY(mu_);  // per connection: its frames in ready_
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_{false};
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_GRPC_TLS_LINK_H_
