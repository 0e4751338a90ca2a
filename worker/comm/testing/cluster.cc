#include "worker/comm/testing/cluster.h"

#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"

namespace dtrain::comm::testing {

std::string KindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kInproc:
      return "Inproc";
    case TransportKind::kInprocPieces:
      return "InprocPieces";
    case TransportKind::kGrpc:
      return "Grpc";
    case TransportKind::kShm:
      return "Shm";
    case TransportKind::kTlsSockets:
      return "TlsSockets";
  }
  return "Unknown";
}

bool IsGrpc(TransportKind kind) {
  return kind == TransportKind::kGrpc || kind == TransportKind::kShm ||
         kind == TransportKind::kTlsSockets;
}

std::unique_ptr<Cluster> Cluster::Create(TransportKind kind, int n) {
  std::unique_ptr<Cluster> c(new Cluster(kind, n));
  if (!IsGrpc(kind)) {
    InprocOptions options;
    if (kind == TransportKind::kInprocPieces) {
      options.frame_bytes = 1000;
      options.piece_bytes = 7;
    }
    c->hub_ = std::make_unique<InprocHub>(n, options);
    return c;
  }
  std::vector<std::string> addresses;
  for (int r = 0; r < n; ++r) {
    GrpcTransportOptions options;
    options.rank = r;
    options.size = n;
    options.listen_address = "127.0.0.1:0";
    options.job_id = "test-job";
    options.frame_bytes = 64 << 10;
    // Small rings: messages larger than the ring and wrap-arounds happen in every test.
    options.shared_memory = kind == TransportKind::kShm;
    options.shm_ring_bytes = 64 << 10;
    // Plaintext streams carry the key here (tests); 3 connections: messages split unevenly.
    options.data_connections = kind == TransportKind::kTlsSockets ? 3 : 0;
    absl::StatusOr<std::unique_ptr<GrpcTransport>> t = GrpcTransport::Start(options);
    if (!t.ok()) {
      // A test helper may stop the test binary; daemons never do.
      fprintf(stderr, "cluster: %s\n", t.status().ToString().c_str());
      std::abort();
    }
    addresses.push_back(absl::StrCat("127.0.0.1:", (*t)->port()));
    c->grpc_.push_back(*std::move(t));
  }
  for (auto& t : c->grpc_) {
    absl::Status s = t->SetPeerAddresses(addresses);
    if (!s.ok()) std::abort();
  }
  return c;
}

Cluster::~Cluster() {
  // Shut every rank down first, so no rank waits on a peer already destroyed.
  for (auto& t : grpc_) t->Shutdown(absl::Seconds(2));
}

Transport* Cluster::transport(int rank) {
  if (hub_ != nullptr) return hub_->transport(rank);
  return grpc_[rank].get();
}

void Cluster::Kill(int rank) {
  if (hub_ != nullptr) {
    hub_->Kill(rank);
  } else {
    grpc_[rank]->Shutdown(absl::ZeroDuration());
  }
}

std::vector<absl::Status> Cluster::Run(const std::function<absl::Status(int rank)>& fn) {
  std::vector<absl::Status> results(n_);
  std::vector<std::thread> threads;
  for (int r = 0; r < n_; ++r) {
    threads.emplace_back([&, r] { results[r] = fn(r); });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace dtrain::comm::testing
