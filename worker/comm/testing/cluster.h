// Test support: n ranks of one job inside the test process, over either transport, each rank
// driven by its own thread (gloo's test style).
//
//   auto cluster = Cluster::Create(TransportKind::kGrpc, 4);
//   std::vector<absl::Status> results = cluster->Run([&](int rank) { ... return status; });
#ifndef DTRAIN_WORKER_COMM_TESTING_CLUSTER_H_
#define DTRAIN_WORKER_COMM_TESTING_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/grpc/grpc_transport.h"
#include "worker/comm/inproc/inproc_transport.h"
#include "worker/comm/transport.h"

namespace dtrain::comm::testing {

enum class TransportKind {
  kInproc,        // in-process, one piece per frame
  kInprocPieces,  // in-process, frames of 1000 bytes cut into pieces of 7 bytes
  kGrpc,          // gRPC on 127.0.0.1, frames of 64 KiB, shared memory off
  kShm,           // the same with the same-host data path: rings of 64 KiB in /dev/shm
  kTlsSockets,    // kGrpc with the cross-host data path: 3 TLS data connections per pair
};
// True for the kinds whose ranks are GrpcTransports (Cluster::grpc).
bool IsGrpc(TransportKind kind);
std::string KindName(TransportKind kind);

class Cluster {
 public:
  static std::unique_ptr<Cluster> Create(TransportKind kind, int n);
  ~Cluster();

  int size() const { return n_; }
  TransportKind kind() const { return kind_; }
  Transport* transport(int rank);
  GrpcTransport* grpc(int rank) { return grpc_[rank].get(); }
  // The rank dies: in-process, InprocHub::Kill; over gRPC, an abrupt shutdown of its
  // transport (streams cancelled, server stopped), which is what peers see of a crash.
  void Kill(int rank);

  // Runs fn(rank) on one thread per rank and returns their statuses, indexed by rank.
  std::vector<absl::Status> Run(const std::function<absl::Status(int rank)>& fn);

 private:
  Cluster(TransportKind kind, int n) : kind_(kind), n_(n) {}
  TransportKind kind_;
  int n_;
  std::unique_ptr<InprocHub> hub_;
  std::vector<std::unique_ptr<GrpcTransport>> grpc_;
};

}  // namespace dtrain::comm::testing

#endif  // DTRAIN_WORKER_COMM_TESTING_CLUSTER_H_
