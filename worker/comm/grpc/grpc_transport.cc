#include "worker/comm/grpc/grpc_transport.h"

#include <malloc.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/peer_secret.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"
#include "worker/comm/grpc/frame_codec.h"
#include "worker/comm/grpc/outgoing_stream.h"
#include "worker/comm/grpc/peer_service.h"
#include "worker/comm/grpc/rank_diagnosis.h"
#include "worker/comm/grpc/send_ops.h"
#include "worker/comm/grpc/shm_link.h"
#include "worker/comm/grpc/tls_link.h"
#include "worker/comm/inbox.h"

namespace dtrain::comm {
namespace {

constexpr int64_t kMaxFrameBytes = (4 << 20) - (64 << 10);
// How long opening them may take before the stream carries the data instead (a data port a
// firewall drops must not take the whole connect deadline).
constexpr absl::Duration kDataConnectTimeout = absl::Seconds(5);

// "127.0.0.1:7000" -> "127.0.0.1", "[::]:7000" -> "[::]"; unix addresses have none.
std::string HostOf(const std::string& address) {
  if (absl::StartsWith(address, "unix:")) return "";
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

grpc::ChannelArguments ChannelArgs(const GrpcTransportOptions& o) {
  grpc::ChannelArguments args;
  const int keepalive_ms = static_cast<int>(absl::ToInt64Milliseconds(o.keepalive));
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per peer pair
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);             // retries would buffer (copy) messages
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, keepalive_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  for (const auto& [name, value] : o.channel_args) args.SetInt(name, value);
  SetPeerChannelArguments(o.tls, &args);  // peers are dialled by IP, verified by worker name
  return args;
}

void TuneMalloc() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    // Per-thread arenas free a whole 64 MiB heap as soon as it empties, whatever the trim
    // threshold, so buffers allocated on gRPC's threads kept being unmapped and refaulted.
    mallopt(M_ARENA_MAX, 1);
  });
}

}  // namespace

struct GrpcTransport::Peer {
  std::unique_ptr<Inbox> inbox;
  absl::Mutex mu;  // held while connecting
  std::string address ABSL_GUARDED_BY(mu);
  std::unique_ptr<OutgoingStream> stream ABSL_GUARDED_BY(mu);
  std::unique_ptr<ShmSender> shm_out ABSL_GUARDED_BY(mu);  // set: data goes through the ring
  std::unique_ptr<TlsSender> tls_out ABSL_GUARDED_BY(mu);  // set: through data connections
  DataPath path ABSL_GUARDED_BY(mu) = DataPath::kNone;
  // Guarded by the transport's mu_:
  bool incoming = false;                     // a stream from this peer was accepted
  std::unique_ptr<ShmRing> shm_offered;      // created for it, not yet attached
  std::shared_ptr<ShmReceiver> shm_in;       // reads its ring into `inbox` (receives pump it)
  std::string data_identity;                 // of the PSK offered to it, not yet attached
  std::shared_ptr<TlsReceiver> tls_offered;  // reads the connections opened with that PSK
  std::shared_ptr<TlsReceiver> tls_in;       // attached (DATA_ATTACHED)
};

class GrpcTransport::Handler : public HelloHandler {
 public:
  explicit Handler(GrpcTransport* t) : t_(t) {}

  absl::StatusOr<Inbox*> Accept(const PeerFrameHeader& hello, PeerFrameHeader* ack) override {
    absl::StatusOr<Inbox*> inbox = Check(hello);
    if (!inbox.ok() && t_->options_.on_refused) t_->options_.on_refused(inbox.status());
    if (!inbox.ok()) return inbox;
    const bool shm = hello.shm_offer() && t_->options_.shared_memory;
    if (hello.data_offer()) {
      OfferDataConnections(hello.src_rank(), **inbox, ack);
      // Without a ring to try first, the stream it is (with one, Attached says why).
      if (t_->data_listener_ == nullptr && !t_->data_listener_error_.empty() && !shm) {
        t_->Report({hello.src_rank(), /*incoming=*/true, DataPath::kGrpc,
                    absl::StrCat("no data connections: ", t_->data_listener_error_)});
      }
    }
    if (!shm) return inbox;
    // The sender may be on this host: a ring only it can prove it mapped (SHM_ATTACHED).
    absl::StatusOr<std::unique_ptr<ShmRing>> ring = ShmRing::Create(t_->options_.shm_ring_bytes);
    if (!ring.ok()) {
      t_->Report({hello.src_rank(), /*incoming=*/true, DataPath::kGrpc,
                  absl::StrCat("cannot create a shared-memory ring: ", ring.status().message())});
      return inbox;
    }
    ack->set_shm_name((*ring)->name());
    absl::MutexLock lock(&t_->mu_);
    t_->peers_[hello.src_rank()]->shm_offered = *std::move(ring);
    return inbox;
  }

  absl::Status Attached(int src, const PeerFrameHeader& attached) override {
    std::unique_ptr<ShmRing> ring;
    {
      absl::MutexLock lock(&t_->mu_);
      ring = std::move(t_->peers_[src]->shm_offered);
    }
    if (ring == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("SHM_ATTACHED from rank ", src, ", which was offered no ring"));
    }
    if (attached.shm_nonce().empty()) {  // not on this host: the ring goes, the stream stays
      {
        absl::MutexLock lock(&t_->mu_);
        // Data connections may follow: DataAttached reports the path.
        if (t_->peers_[src]->tls_offered != nullptr) return absl::OkStatus();
      }
      std::string why =
          "the peer could not map this rank's ring (another host, or a /dev/shm not shared "
          "with it)";
      if (!t_->data_listener_error_.empty()) {
        absl::StrAppend(&why, "; no data connections: ", t_->data_listener_error_);
      }
      t_->Report({src, /*incoming=*/true, DataPath::kGrpc, std::move(why)});
      return absl::OkStatus();
    }
    if (!PeerSecretsEqual(attached.shm_nonce(), ring->nonce())) {
      return absl::PermissionDeniedError(absl::StrCat(
          "rank ", src, " answered a shared-memory ring with another nonce than the ring's"));
    }
    ring->Unlink();  // both sides mapped it: nothing of the job stays in /dev/shm
    absl::MutexLock lock(&t_->mu_);
    if (t_->shut_down_) return absl::UnavailableError("the transport is shutting down");
    Peer& peer = *t_->peers_[src];
    WithdrawDataOfferLocked(peer);  // same host: no data connections
    peer.shm_in = std::make_shared<ShmReceiver>(std::move(ring), peer.inbox.get());
    t_->Report({src, /*incoming=*/true, DataPath::kSharedMemory, ""});
    return absl::OkStatus();
  }

  absl::Status DataAttached(int src, const PeerFrameHeader& attached) override {
    absl::MutexLock lock(&t_->mu_);
    Peer& peer = *t_->peers_[src];
    std::shared_ptr<TlsReceiver> receiver = peer.tls_offered;
    WithdrawDataOfferLocked(peer);
    if (receiver == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("DATA_ATTACHED from rank ", src, ", which was offered no data connections"));
    }
    if (attached.data_connections() <= 0) {
      t_->Report({src, /*incoming=*/true, DataPath::kGrpc,
                  absl::StrCat("the peer could not open data connections: ", attached.data_why())});
      return absl::OkStatus();
    }
    if (t_->shut_down_) return absl::UnavailableError("the transport is shutting down");
    peer.tls_in = std::move(receiver);
    t_->Report({src, /*incoming=*/true, DataPath::kTlsSockets, ""});
    return absl::OkStatus();
  }

  void Ended(int src) override {
    absl::MutexLock lock(&t_->mu_);
    t_->peers_[src]->shm_offered.reset();  // unlinks a ring never attached
    WithdrawDataOfferLocked(*t_->peers_[src]);
  }

  absl::StatusOr<RankDiagnosis> Diagnose(const DiagnoseRankRequest& request) override {
    const GrpcTransportOptions& o = t_->options_;
    if (!PeerSecretsEqual(request.job_secret(), o.job_secret)) {
      return absl::PermissionDeniedError(absl::StrCat("refused Diagnose for job '",
                                                      request.job_id(),
                                                      "': its job secret is not the one of "
                                                      "the run rank ",
                                                      o.rank, " serves"));
    }
    if (request.job_id() != o.job_id) {
      return absl::FailedPreconditionError(absl::StrCat("Diagnose for job '", request.job_id(),
                                                        "', rank ", o.rank, " runs job '", o.job_id,
                                                        "'"));
    }
    if (request.clock_only()) {  // a clock probe (`dtrain trace`): the time, nothing else
      RankDiagnosis probe;
      probe.set_rank(o.rank);
      probe.set_now_unix_ns(absl::GetCurrentTimeNanos());
      return probe;
    }
    if (o.recorder == nullptr) {
      return absl::UnimplementedError(absl::StrCat("rank ", o.rank, " keeps no flight recorder"));
    }
    return RankDiagnosisOf(*o.recorder, o.rank);
  }

 private:
  absl::StatusOr<Inbox*> Check(const PeerFrameHeader& hello) {
    const GrpcTransportOptions& o = t_->options_;
    // First: a caller without the run's secret learns nothing more about this rank.
    if (!PeerSecretsEqual(hello.job_secret(), o.job_secret)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "refused a stream from rank ", hello.src_rank(), " for job '", hello.job_id(),
          "': its job secret is not the one of the run rank ", o.rank,
          " serves (only workers the coordinator placed in this run of the job may connect)"));
    }
    if (hello.job_id() != o.job_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "HELLO for job '", hello.job_id(), "', rank ", o.rank, " runs job '", o.job_id, "'"));
    }
    if (hello.dst_rank() != o.rank) {
      return absl::FailedPreconditionError(
          absl::StrCat("HELLO for rank ", hello.dst_rank(), " reached rank ", o.rank));
    }
    const int src = hello.src_rank();
    if (src < 0 || src >= o.size || src == o.rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("HELLO from rank ", src, ", not a peer in ", o.size, " ranks"));
    }
    absl::MutexLock lock(&t_->mu_);
    if (t_->shut_down_) return absl::UnavailableError("the transport is shutting down");
    Peer& peer = *t_->peers_[src];
    if (peer.incoming) {
      return absl::AlreadyExistsError(absl::StrCat("rank ", src, " already has a stream"));
    }
    peer.incoming = true;
    return peer.inbox.get();
  }

  // A fresh PSK for the sender of a HELLO, registered with the listener, in the HELLO_ACK.
  void OfferDataConnections(int src, Inbox& inbox, PeerFrameHeader* ack) {
    if (t_->data_listener_ == nullptr) return;  // the sender says so (AttachDataConnections)
    absl::StatusOr<DataPsk> psk = DataPsk::New();
    if (!psk.ok()) {
      t_->Report({src, /*incoming=*/true, DataPath::kGrpc,
                  absl::StrCat("no key for data connections: ", psk.status().message())});
      return;
    }
    auto receiver = std::make_shared<TlsReceiver>(&inbox);
    t_->data_listener_->Register(*psk, receiver, kMaxDataConnections);
    ack->set_data_port(t_->data_listener_->port());
    ack->set_data_psk_identity(psk->identity);
    ack->set_data_psk(psk->key);
    absl::MutexLock lock(&t_->mu_);
    Peer& peer = *t_->peers_[src];
    peer.data_identity = psk->identity;
    peer.tls_offered = std::move(receiver);
  }

  // The PSK offered to `peer` admits no more connections (those opened stay with tls_offered).
  void WithdrawDataOfferLocked(Peer& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t_->mu_) {
    if (!peer.data_identity.empty()) t_->data_listener_->Unregister(peer.data_identity);
    peer.data_identity.clear();
    peer.tls_offered.reset();
  }

  GrpcTransport* t_;
};

GrpcTransport::GrpcTransport(GrpcTransportOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<GrpcTransport>> GrpcTransport::Start(GrpcTransportOptions o) {
  if (o.size == 0) o.size = static_cast<int>(o.peer_addresses.size());
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " of ", o.size, " ranks: need 0 <= rank < size"));
  }
  if (!o.peer_addresses.empty() && static_cast<int>(o.peer_addresses.size()) != o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.peer_addresses.size(), " peer addresses for ", o.size, " ranks"));
  }
  if (!o.peer_names.empty() && static_cast<int>(o.peer_names.size()) != o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.peer_names.size(), " peer names for ", o.size, " ranks"));
  }
  if (o.frame_bytes < 1 || o.frame_bytes > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame_bytes ", o.frame_bytes, " outside [1, ", kMaxFrameBytes, "]"));
  }
  if (o.listen_address.empty()) {
    if (o.peer_addresses.empty()) {
      return absl::InvalidArgumentError("neither a listen address nor this rank's address");
    }
    const std::string& own = o.peer_addresses[o.rank];
    o.listen_address =
        absl::StartsWith(own, "unix:") ? own : absl::StrCat("[::]", own.substr(own.rfind(':')));
  }
  if (o.tune_malloc) TuneMalloc();
  std::unique_ptr<GrpcTransport> t(new GrpcTransport(std::move(o)));
  const GrpcTransportOptions& opt = t->options_;
  for (int r = 0; r < opt.size; ++r) {
    auto peer = std::make_unique<Peer>();
    peer->inbox = std::make_unique<Inbox>(opt.peer_names.empty() ? absl::StrCat("rank ", r)
                                                                 : opt.peer_names[r]);
    t->peers_.push_back(std::move(peer));
  }
  if (!opt.peer_addresses.empty()) RETURN_IF_ERROR(t->SetPeerAddresses(opt.peer_addresses));

  t->data_connections_ = opt.data_connections >= 0
                             ? opt.data_connections
                             : (opt.tls.enabled() ? kDefaultDataConnections : 0);
  if (t->data_connections_ > kMaxDataConnections) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_connections ", t->data_connections_, " above ", kMaxDataConnections));
  }
  if (t->data_connections_ > 0 && !HostOf(opt.listen_address).empty()) {
    // Without a listener, senders are told so and use the stream (AttachDataConnections).
    absl::StatusOr<std::unique_ptr<DataListener>> listener =
        DataListener::Start(HostOf(opt.listen_address), opt.data_port);
    if (listener.ok()) {
      t->data_listener_ = *std::move(listener);
      if (opt.on_refused) t->data_listener_->set_on_refused(opt.on_refused);
    } else {
      t->data_listener_error_ = std::string(listener.status().message());
    }
  }
  t->handler_ = std::make_unique<Handler>(t.get());
  t->service_ = std::make_unique<PeerServiceImpl>(t->handler_.get());
  grpc::ServerBuilder builder;
  const int keepalive_ms = static_cast<int>(absl::ToInt64Milliseconds(opt.keepalive));
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = ServerCredentials(opt.tls);
  if (!credentials.ok()) return Annotate(credentials.status(), "the peer service's TLS");
  builder.AddListeningPort(opt.listen_address, *credentials, &t->port_);
  builder.RegisterService(t->service_.get());
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, keepalive_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             keepalive_ms / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  for (const auto& [name, value] : opt.channel_args) builder.AddChannelArgument(name, value);
  t->server_ = builder.BuildAndStart();
  if (t->server_ == nullptr || t->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("rank ", opt.rank, ": cannot listen on ", opt.listen_address));
  }
  return t;
}

GrpcTransport::~GrpcTransport() { Shutdown(absl::Seconds(5)); }

absl::Status GrpcTransport::SetPeerAddresses(std::vector<std::string> addresses) {
  if (static_cast<int>(addresses.size()) != options_.size) {
    return absl::InvalidArgumentError(
        absl::StrCat(addresses.size(), " peer addresses for ", options_.size, " ranks"));
  }
  for (int r = 0; r < options_.size; ++r) {
    absl::MutexLock lock(&peers_[r]->mu);
    peers_[r]->address = addresses[r];
    if (options_.peer_names.empty()) {
      peers_[r]->inbox->set_peer_name(absl::StrCat("rank ", r, " (", addresses[r], ")"));
    }
  }
  return absl::OkStatus();
}

std::string GrpcTransport::PeerName(int peer) const {
  if (peer < 0 || peer >= options_.size) return absl::StrCat("rank ", peer);
  return peers_[peer]->inbox->peer_name();
}

absl::Status GrpcTransport::CheckPeer(int peer, absl::string_view what) const {
  if (peer < 0 || peer >= options_.size || peer == options_.rank) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", peer, " is not a peer of rank ",
                                                   options_.rank, " in ", options_.size, " ranks"));
  }
  return absl::OkStatus();
}

absl::StatusOr<OutgoingStream*> GrpcTransport::StreamTo(int peer, absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return absl::CancelledError("the transport was shut down");
  }
  Peer& p = *peers_[peer];
  absl::MutexLock lock(&p.mu);
  if (p.stream != nullptr) {
    absl::Status failure = p.stream->status();
    if (!failure.ok()) return failure;
    return p.stream.get();
  }
  if (p.address.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("no address for rank ", peer));
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentials(options_.tls);
  if (!credentials.ok()) return Annotate(credentials.status(), "TLS to peers");
  auto channel = grpc::CreateCustomChannel(p.address, *credentials, ChannelArgs(options_));
  Inbox* inbox = p.inbox.get();
  p.stream = std::make_unique<OutgoingStream>(
      std::move(channel),
      // A peer we cannot send to is gone for receiving too; one that left cleanly is done,
      // not failed (Inbox::Close).
      [inbox](const absl::Status& s) { inbox->Fail(s); },
      [inbox](const absl::Status& s) { inbox->Close(s); });
  PeerFrameHeader hello;
  hello.set_type(HELLO);
  hello.set_src_rank(options_.rank);
  hello.set_dst_rank(peer);
  hello.set_job_id(options_.job_id);
  hello.set_job_secret(options_.job_secret);
  hello.set_shm_offer(options_.shared_memory);
  hello.set_data_offer(data_connections_ > 0);
  // A failed stream stays in place: it remembers the failure, and must outlive gRPC's OnDone.
  RETURN_IF_ERROR(p.stream->Start(hello, deadline));
  std::string why;  // the stream although another path was wanted: why
  RETURN_IF_ERROR(AttachRing(peer, p, &why));
  if (p.path != DataPath::kSharedMemory && data_connections_ > 0) {
    RETURN_IF_ERROR(AttachDataConnections(peer, p, deadline, &why));
  }
  if (p.path == DataPath::kGrpc && !why.empty()) {
    Report({peer, /*incoming=*/false, DataPath::kGrpc, why});
  }
  return p.stream.get();
}

absl::Status GrpcTransport::AttachRing(int peer, Peer& p, std::string* why) {
  p.path = DataPath::kGrpc;
  if (!options_.shared_memory) return absl::OkStatus();
  const std::string name = p.stream->ack().shm_name();
  if (name.empty()) {
    *why =
        "the peer offered no shared-memory ring (its shared memory is off, or its /dev/shm has "
        "no room)";
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<ShmRing>> ring =
      IsSegmentName(name)
          ? ShmRing::Attach(name)
          : absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a ring name"));
  PeerFrameHeader attached;
  attached.set_type(SHM_ATTACHED);
  if (ring.ok()) attached.set_shm_nonce((*ring)->nonce());
  std::vector<grpc::ByteBuffer> frame;
  frame.push_back(EncodeFrame(attached, grpc::Slice()));
  RETURN_IF_ERROR(p.stream->Enqueue(std::move(frame), nullptr));
  if (!ring.ok()) {
    *why = absl::StrCat(
        "cannot map the peer's shared-memory ring (another host, or a /dev/shm not shared with "
        "it): ",
        ring.status().message());
    return absl::OkStatus();
  }
  p.shm_out = std::make_unique<ShmSender>(*std::move(ring), p.stream.get());
  p.path = DataPath::kSharedMemory;
  Report({peer, /*incoming=*/false, DataPath::kSharedMemory, ""});
  return absl::OkStatus();
}

absl::Status GrpcTransport::AttachDataConnections(int peer, Peer& p, absl::Time deadline,
                                                  std::string* why) {
  const PeerFrameHeader& ack = p.stream->ack();
  auto add_why = [why](absl::string_view more) {
    *why = why->empty() ? std::string(more) : absl::StrCat(*why, "; ", more);
  };
  if (ack.data_port() == 0) {
    add_why("the peer offered no data connections (they are off there, or it cannot listen)");
    return absl::OkStatus();
  }
  const DataPsk psk{ack.data_psk_identity(), ack.data_psk()};
  absl::StatusOr<std::vector<std::unique_ptr<DataConnection>>> connections =
      HostOf(p.address).empty()
          ? absl::FailedPreconditionError(absl::StrCat("'", p.address, "' is no TCP address"))
          : ConnectData(HostOf(p.address), ack.data_port(), psk, data_connections_,
                        std::min(deadline, absl::Now() + kDataConnectTimeout));
  PeerFrameHeader attached;
  attached.set_type(DATA_ATTACHED);
  if (connections.ok()) {
    attached.set_data_connections(data_connections_);
  } else {
    attached.set_data_why(std::string(connections.status().message()));
  }
  std::vector<grpc::ByteBuffer> frame;
  frame.push_back(EncodeFrame(attached, grpc::Slice()));
  RETURN_IF_ERROR(p.stream->Enqueue(std::move(frame), nullptr));
  if (!connections.ok()) {
    add_why(absl::StrCat("cannot open data connections: ", connections.status().message()));
    return absl::OkStatus();
  }
  p.tls_out =
      std::make_unique<TlsSender>(*std::move(connections), p.stream.get(), options_.frame_bytes);
  p.path = DataPath::kTlsSockets;
  Report({peer, /*incoming=*/false, DataPath::kTlsSockets, ""});
  return absl::OkStatus();
}

void GrpcTransport::Report(const DataPathEvent& event) const {
  if (options_.on_data_path) options_.on_data_path(event);
}

DataPath GrpcTransport::data_path(int peer) const {
  if (peer < 0 || peer >= options_.size || peer == options_.rank) return DataPath::kNone;
  Peer& p = *peers_[peer];
  absl::MutexLock lock(&p.mu);
  return p.path;
}

absl::Status GrpcTransport::Connect(absl::Span<const int> peers, absl::Time deadline) {
  for (int peer : peers) {
    RETURN_IF_ERROR(CheckPeer(peer, "connecting"));
    absl::Status s = StreamTo(peer, deadline).status();
    if (!s.ok()) return Annotate(s, absl::StrCat("connecting to ", PeerName(peer)));
  }
  return absl::OkStatus();
}

absl::StatusOr<SendHandle> GrpcTransport::StartSend(int peer, const MessageKey& key,
                                                    const TensorMeta& meta,
                                                    absl::Span<const std::byte> data,
                                                    absl::Time deadline) {
  const std::string what = absl::StrCat("sending ", key.ToString(), " to ", PeerName(peer));
  RETURN_IF_ERROR(CheckPeer(peer, what));
  const int64_t total = data.size();
  if (total != meta.num_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", total, " bytes for ", meta.ToString()));
  }
  absl::StatusOr<OutgoingStream*> stream = StreamTo(peer, deadline);
  if (!stream.ok()) return Annotate(stream.status(), what);
  ShmSender* shm;
  TlsSender* tls;
  {
    absl::MutexLock lock(&peers_[peer]->mu);
    shm = peers_[peer]->shm_out.get();
    tls = peers_[peer]->tls_out.get();
  }
  if (shm != nullptr) {
    return SendHandle(MakeLinkSendOp(shm->Enqueue(key, meta, data, ""), *stream, what,
                                     "the shared-memory ring", deadline));
  }
  if (tls != nullptr) {
    return SendHandle(MakeLinkSendOp(tls->Enqueue(key, meta, data, ""), *stream, what,
                                     "the data connections", deadline));
  }

  const int64_t frame_bytes = options_.frame_bytes;
  const int64_t frames = std::max<int64_t>(1, (total + frame_bytes - 1) / frame_bytes);
  auto state = std::make_shared<GrpcSendState>();
  {
    absl::MutexLock lock(&state->mu);
    state->unwritten = static_cast<int>(frames);
  }
  std::vector<grpc::ByteBuffer> buffers;
  buffers.reserve(frames);
  for (int64_t offset = 0, i = 0; i < frames; ++i, offset += frame_bytes) {
    const int64_t len = std::min(frame_bytes, total - offset);
    PeerFrameHeader header = DataHeader(key, offset, total, offset == 0 ? &meta : nullptr);
    buffers.push_back(EncodeFrame(
        header, len > 0 ? PayloadSlice(data.subspan(offset, len), state) : grpc::Slice()));
  }
  absl::Status queued = (*stream)->Enqueue(std::move(buffers), state);
  if (!queued.ok()) return Annotate(queued, what);
  return SendHandle(MakeGrpcSendOp(std::move(state), *stream, what, deadline));
}

absl::Status GrpcTransport::Recv(int peer, const MessageKey& key, const TensorMeta& expected,
                                 PieceSink sink, absl::Time deadline, const RecvOptions& options) {
  RETURN_IF_ERROR(CheckPeer(peer, absl::StrCat("receiving ", key.ToString())));
  std::function<absl::Status()> watch;
  if (!options.watch.empty()) {
    watch = [this, peers = options.watch]() { return WatchPeers(*this, peers); };
  }
  std::shared_ptr<ShmReceiver> shm;
  {
    absl::MutexLock lock(&mu_);
    shm = peers_[peer]->shm_in;
  }
  if (shm == nullptr) {
    return peers_[peer]->inbox->Receive(key, expected, sink, deadline, options.order, watch);
  }
  // The receive consumes the peer's ring itself (ShmReceiver::Pump).
  shm->ReceiveBegins();
  absl::Status received =
      peers_[peer]->inbox->Receive(key, expected, sink, deadline, options.order, watch,
                                   [&shm](absl::Time until) { shm->Pump(until); });
  shm->ReceiveEnds();
  return received;
}

bool GrpcTransport::Arrived(int peer, const MessageKey& key) {
  if (!CheckPeer(peer, "").ok()) return true;  // Recv fails at once
  std::shared_ptr<ShmReceiver> shm;
  {
    absl::MutexLock lock(&mu_);
    shm = peers_[peer]->shm_in;
  }
  if (shm != nullptr && !peers_[peer]->inbox->Arrived(key)) {
    // The ring is read by receives, and by the reader thread only 5 ms after the last one: pump
    // it here, as a receive would, but without waiting for a record.
    shm->ReceiveBegins();
    shm->Pump(absl::Now());
    shm->ReceiveEnds();
  }
  return peers_[peer]->inbox->Arrived(key);
}

absl::Status GrpcTransport::Post(int peer, const MessageKey& key, std::string payload) {
  const std::string what = absl::StrCat("posting ", key.ToString(), " to ", PeerName(peer));
  RETURN_IF_ERROR(CheckPeer(peer, what));
  OutgoingStream* stream;
  ShmSender* shm;
  TlsSender* tls;
  {
    Peer& p = *peers_[peer];
    absl::MutexLock lock(&p.mu);
    if (p.stream == nullptr) return absl::UnavailableError(absl::StrCat(what, ": no stream"));
    stream = p.stream.get();
    shm = p.shm_out.get();
    tls = p.tls_out.get();
  }
  const TensorMeta meta = TensorMeta::Bytes(payload.size());
  if (shm != nullptr) {  // behind the data already in the ring, like a frame on the stream
    if (absl::Status s = stream->status(); !s.ok()) return Annotate(s, what);
    shm->Enqueue(key, meta, {}, std::move(payload));
    return absl::OkStatus();
  }
  if (tls != nullptr) {  // behind the data already on the connections
    if (absl::Status s = stream->status(); !s.ok()) return Annotate(s, what);
    tls->Enqueue(key, meta, {}, std::move(payload));
    return absl::OkStatus();
  }
  std::vector<grpc::ByteBuffer> frame;
  frame.push_back(EncodeFrame(DataHeader(key, 0, payload.size(), &meta),
                              payload.empty() ? grpc::Slice() : grpc::Slice(payload)));
  return Annotate(stream->Enqueue(std::move(frame), nullptr), what);
}

absl::Status GrpcTransport::PeerStatus(int peer) const {
  if (peer < 0 || peer >= options_.size || peer == options_.rank) return absl::OkStatus();
  // Both a broken incoming stream and a broken outgoing one fail the peer's inbox.
  absl::Status failure = peers_[peer]->inbox->failure();
  if (failure.ok()) return failure;
  return absl::Status(failure.code(), absl::StrCat(PeerName(peer), ": ", failure.message()));
}

void GrpcTransport::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  const absl::Time deadline = absl::Now() + grace;
  for (auto& peer : peers_) {
    peer->inbox->Fail(
        absl::CancelledError(absl::StrCat("rank ", options_.rank, "'s transport was shut down")));
  }
  for (auto& peer : peers_) {
    absl::MutexLock lock(&peer->mu);
    if (peer->stream == nullptr) continue;
    if (peer->shm_out != nullptr) {
      // Leaving cleanly: the peer reads what is in the ring before the stream's half-close
      // tells it that nothing more comes.
      if (grace > absl::ZeroDuration()) peer->shm_out->Drain(deadline);
      peer->shm_out->Stop();
    }
    if (peer->tls_out != nullptr) {
      // The same through the data connections: the peer answers every close_notify once it
      // delivered what came before it.
      if (grace > absl::ZeroDuration()) peer->tls_out->Drain(deadline);
      peer->tls_out->Stop();
    }
    if (grace == absl::ZeroDuration()) peer->stream->Cancel();
    // gRPC never reported the end of the call: leak the reactor rather than free it under gRPC.
    if (!peer->stream->Close(deadline)) peer->stream.release();
  }
  if (server_ != nullptr) {
    // Leaving cleanly: every peer streaming to us learns that we are done, not failed, so its
    // waits on other peers go on (PeerServiceImpl::SayGoodbye). A live peer reads the GOODBYE
    // in milliseconds; one that reads nothing (frozen) must not hold this rank's teardown, and
    // with it a recovery's stop phase, for the whole grace.
    if (grace > absl::ZeroDuration()) {
      service_->SayGoodbye(std::min(deadline, absl::Now() + absl::Milliseconds(500)));
    }
    // Incoming streams end now: nothing more will be received, and their peers should learn
    // at once that this rank is gone.
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
    server_->Wait();
  }
  if (data_listener_ != nullptr) data_listener_->Stop();
  std::vector<std::shared_ptr<ShmReceiver>> receivers;
  std::vector<std::shared_ptr<TlsReceiver>> tls_receivers;
  {
    absl::MutexLock lock(&mu_);
    for (auto& peer : peers_) {
      peer->shm_offered.reset();
      if (peer->shm_in != nullptr) receivers.push_back(std::move(peer->shm_in));
      if (peer->tls_offered != nullptr) tls_receivers.push_back(std::move(peer->tls_offered));
      if (peer->tls_in != nullptr) tls_receivers.push_back(std::move(peer->tls_in));
    }
  }
  for (auto& receiver : tls_receivers) receiver->Stop();
  tls_receivers.clear();
  // Stops their threads, outside the lock (a sink may still be running); a receive pumping one
  // keeps it mapped until it returns.
  for (auto& receiver : receivers) receiver->Stop();
  receivers.clear();
}

}  // namespace dtrain::comm
