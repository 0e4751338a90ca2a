// GrpcTransport: the Transport of worker/comm/transport.h over gRPC. Every rank serves
// PeerService (proto/peer.proto); for each peer it sends to, it opens one bidirectional
// Connect stream (HELLO, HELLO_ACK, then DATA frames) and keeps it. Messages are cut into
// frames of at most `frame_bytes` (below gRPC's 4 MiB limit); payloads are never copied on the
// way out (each frame's payload is a slice over the caller's buffer) and are read in place on
// the way in (the inbox holds the received slices until a receive consumes them).
//
//   GrpcTransportOptions options;
//   options.rank = 1;
//   options.peer_addresses = {"10.0.0.1:7000", "10.0.0.2:7000"};
//   options.job_id = "job-42";
//   ASSIGN_OR_RETURN(auto transport, GrpcTransport::Start(options));
//   RETURN_IF_ERROR(transport->Connect({0}, absl::Now() + absl::Seconds(30)));
//
// Only the job's own run connects: HELLOs carry the run's secret (options.job_secret), checked
// in constant time before anything else; a stream from anyone else is refused.
//
// Failure: a broken stream (peer died, network failed, keepalive timed out) fails pending and
// later sends to that peer and receives from it with Unavailable naming the peer; a send that
// misses its deadline cancels the stream to that peer. Streams are not
// reopened: the step fails and the job restarts. A peer that leaves cleanly (Shutdown with a
// grace period: half-close, then GOODBYE) is not failed: what it sent is received, receiving
// anything else from it or sending to it fails at once, and PeerStatus stays OK.
//
// Other hosts: with mutual TLS, the data to a peer goes through data connections of the
// transport's own, TLS 1.3 with a pre-shared key sent on the stream (grpc/tls_link.h), several
// per peer so that encryption runs on several cores; the stream again keeps set-up, GOODBYE and
// failure, and carries the data where they cannot be opened.
//
// Same host: with `shared_memory` (the default), the data to a peer whose /dev/shm is this
// rank's own goes through a shared-memory ring instead of the stream (grpc/shm_link.h has the
// handshake that proves it); the stream still carries set-up, GOODBYE and failure, so every
// property above holds on both paths. Where the handshake fails (another host, a /dev/shm not
// shared or full) the stream carries the data, and on_data_path says so.
//
// Tests on one machine listen on port 0 and exchange ports afterwards:
//   options.listen_address = "127.0.0.1:0"; ... ; transport->SetPeerAddresses(addresses);
#ifndef DTRAIN_WORKER_COMM_GRPC_GRPC_TRANSPORT_H_
#define DTRAIN_WORKER_COMM_GRPC_GRPC_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "worker/comm/flight_recorder.h"
#include "worker/comm/grpc/shm_link.h"
#include "worker/comm/transport.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace dtrain::comm {

// Data connections per peer pair by default with mutual TLS (docs/PERFORMANCE.md, "Two hosts
// on one machine": measured 1, 2 and 4).
inline constexpr int kDefaultDataConnections = 4;
// Data connections a receiver admits per peer pair at most (and a sender may ask for).
inline constexpr int kMaxDataConnections = 16;

struct GrpcTransportOptions {
  int rank = 0;
  // Every rank's PeerService address, indexed by rank. May be left empty and given later
  // (SetPeerAddresses) when `size` is set.
  std::vector<std::string> peer_addresses;
  int size = 0;  // defaults to peer_addresses.size()
  // How every error names each rank, indexed by rank (size entries, or none). The worker daemon
  // passes the placement's worker ids and addresses ("rank 3 (worker w4 at 127.0.0.1:7074, dp1
  // pp0 tp1)"), so its errors name the worker where they are made. None: "rank 3 (<address>)".
  std::vector<std::string> peer_names;
  // Where to listen; default "[::]:<port of peer_addresses[rank]>". Port 0 picks one (port()).
  std::string listen_address;
  // Both ends of a stream must name the same job and carry the same secret: the run's
  // Placement.peer_secret (common/peer_secret.h). Every outgoing HELLO carries `job_secret`;
  // an incoming HELLO with another one is refused with PermissionDenied naming the job (the
  // secret is never shown), and its sender's Connect fails saying the peer refused its secret.
  // Empty on both ends (in-process tests): no secret.
  std::string job_id;
  std::string job_secret;
  // Told every HELLO this rank refuses (why, naming the caller's rank and job), on a gRPC
  // thread: the worker logs it, since the caller may be an intruder rather than a peer. May be
  // empty; must not block.
  std::function<void(const absl::Status&)> on_refused;
  // Mutual TLS of the peer service and of the channels to peers (common/tls.h): every peer
  // presents a worker certificate of the cluster CA and is verified as kWorkerPeerHostname.
  // Plaintext by default (in-process tests); the worker daemon passes its --tls_* files.
  TlsFiles tls = TlsFiles::Insecure();
  // What the peer service's Diagnose answers (`dtrain diagnose`), to callers with the run's job
  // id and secret; null: Unimplemented. Must outlive the transport.
  const FlightRecorder* recorder = nullptr;
  // Largest payload per frame; at most 4 MiB - 64 KiB.
  int64_t frame_bytes = 1 << 20;
  // Keepalive pings on idle connections, so a peer whose host vanished without closing its
  // connections is noticed (and its stream failed) after about twice this.
  absl::Duration keepalive = absl::Seconds(10);
  // Process-wide, once: raise glibc malloc's mmap and trim thresholds (to 32 MiB and 512 MiB)
  // and use one arena, so the multi-MiB buffers gRPC reads into are reused instead of being
  // unmapped after every message and faulted in again (page clearing then costs as much CPU
  // as the data copies). Call before starting other threads that allocate.
  bool tune_malloc = true;
  // Extra integer gRPC channel arguments, for the server and every channel (tuning, e.g.
  // {"grpc.http2.max_frame_size", 1 << 20}); they override the transport's own.
  std::vector<std::pair<std::string, int>> channel_args;
  // Same-host data path (grpc/shm_link.h): offer and accept shared-memory rings, of
  // `shm_ring_bytes` each (one per ordered pair of ranks that exchange data, in /dev/shm while
  // the job runs; a message larger than the ring goes through in pieces). Off: always the stream.
  bool shared_memory = true;
  int64_t shm_ring_bytes = 4 << 20;
  // Cross-host data path (grpc/tls_link.h): to a peer not reached through shared memory, send
  // through `data_connections` TCP connections of the transport's own, each a TLS 1.3 session
  // keyed by a random pre-shared key that the receiver sends on the (mutual-TLS) stream, so a
  // large message is encrypted and decrypted on that many threads at once. -1 (the default):
  // kDefaultDataConnections when `tls` is mutual TLS, else none (plaintext streams: the data
  // goes on the stream; a test may still ask for connections, whose key then crossed a
  // plaintext stream). 0: never. Where the peer offers none or they cannot be opened, the
  // stream carries the data and on_data_path says why.
  int data_connections = -1;
  // The port the data connections' listener binds (on listen_address's host); 0: one the
  // kernel picks. Fixed, a firewall between hosts can let exactly it through. If it cannot be
  // bound (taken), peers on other hosts use the stream and on_data_path says why.
  int data_port = 0;
  // Told the data path of every peer this rank sends to (incoming = false) or receives from
  // (true), once set up, with why it is the stream when shared memory was wanted: the worker
  // logs it and counts it. On the connecting or a gRPC thread; may be empty; must not block.
  std::function<void(const DataPathEvent&)> on_data_path;
};

class OutgoingStream;
class PeerServiceImpl;
class ShmSender;
class ShmReceiver;
class DataListener;

class GrpcTransport final : public Transport {
 public:
  // Starts the server. InvalidArgument for bad options, Unavailable if it cannot listen.
  static absl::StatusOr<std::unique_ptr<GrpcTransport>> Start(GrpcTransportOptions options);
  ~GrpcTransport() override;  // Shutdown(absl::Seconds(5))

  int port() const { return port_; }
  // Before the first send: every rank's address (size() entries). Without peer_names a rank is
  // then named "rank 3 (<address>)".
  absl::Status SetPeerAddresses(std::vector<std::string> addresses);
  // Opens the streams to `peers` now rather than at the first send. Unavailable naming the
  // first peer that did not answer by `deadline`.
  absl::Status Connect(absl::Span<const int> peers, absl::Time deadline);
  // Closes the streams (after their queued frames, waiting at most `grace`), stops the server
  // and fails pending receives with Cancelled. Zero grace: abrupt, as a crash looks to peers.
  void Shutdown(absl::Duration grace);

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::string PeerName(int peer) const override;
  absl::StatusOr<SendHandle> StartSend(int peer, const MessageKey& key, const TensorMeta& meta,
                                       absl::Span<const std::byte> data,
                                       absl::Time deadline) override;
  absl::Status Recv(int peer, const MessageKey& key, const TensorMeta& expected, PieceSink sink,
                    absl::Time deadline, const RecvOptions& options) override;
  // Over shared memory, first takes what the peer's ring holds (without waiting).
  bool Arrived(int peer, const MessageKey& key) override;
  absl::Status PeerStatus(int peer) const override;
  absl::Status Post(int peer, const MessageKey& key, std::string payload) override;

  // Where messages to `peer` go (kNone before the first send or Connect).
  DataPath data_path(int peer) const;

 private:
  class Handler;
  struct Peer;
  explicit GrpcTransport(GrpcTransportOptions options);
  absl::Status CheckPeer(int peer, absl::string_view what) const;
  // The stream to `peer`, opening it if needed.
  absl::StatusOr<OutgoingStream*> StreamTo(int peer, absl::Time deadline);
  // After the HELLO_ACK: maps the ring it named, if any, and answers SHM_ATTACHED; `why` says
  // why not, if shared memory was wanted.
  absl::Status AttachRing(int peer, Peer& p, std::string* why);  // p.mu held
  // Then, unless shared memory was set up: opens the data connections the HELLO_ACK offered, if
  // any, and answers DATA_ATTACHED; adds to `why` why not.
  absl::Status AttachDataConnections(int peer, Peer& p, absl::Time deadline,
                                     std::string* why);  // p.mu held
  void Report(const DataPathEvent& event) const;

  GrpcTransportOptions options_;
  int port_ = 0;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<PeerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::unique_ptr<Peer>> peers_;     // indexed by rank
  int data_connections_ = 0;                     // options_.data_connections resolved
  std::unique_ptr<DataListener> data_listener_;  // null: no data connections accepted
  std::string data_listener_error_;              // why there is none, when one was wanted
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_GRPC_GRPC_TRANSPORT_H_
