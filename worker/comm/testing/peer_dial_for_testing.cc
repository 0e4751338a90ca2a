// TEST ONLY: opens one peer stream the way a rank does (HELLO, then waits for HELLO_ACK), with
// whatever job id, ranks and secret it is told, and prints what the peer answered. The
// integration case roles_peer uses it as a worker of job A that tries to open a stream into a
// rank of job B with job A's own secret; the peer must refuse it.
//
//   peer_dial_for_testing --address=127.0.0.1:7072 --job_id=job-000002 --src_rank=0
//       --dst_rank=1 --size=2 --secret_hex=00112233... [--timeout_s=10]
//       [--tls_ca=ca.pem --tls_cert=worker.pem --tls_key=worker.key]
//
// Prints one line, "connected" (exit 0) or "refused: <error>" (exit 1); exit 2 for bad flags.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/comm/grpc/grpc_transport.h"

ABSL_FLAG(std::string, address, "", "host:port of the peer service to dial");
ABSL_FLAG(std::string, job_id, "", "the job the HELLO claims");
ABSL_FLAG(int, src_rank, 0, "the rank the HELLO claims to come from");
ABSL_FLAG(int, dst_rank, 1, "the rank the HELLO is for");
ABSL_FLAG(int, size, 2, "ranks in the job");
ABSL_FLAG(std::string, secret_hex, "", "the job secret the HELLO carries, in hex");
ABSL_FLAG(double, timeout_s, 10, "how long to wait for the answer (seconds)");
ABSL_FLAG(std::string, tls_ca, "", "the cluster CA (PEM); empty: plaintext");
ABSL_FLAG(std::string, tls_cert, "", "this tool's certificate (PEM), e.g. the worker's");
ABSL_FLAG(std::string, tls_key, "", "its private key (PEM)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int size = absl::GetFlag(FLAGS_size);
  const int src = absl::GetFlag(FLAGS_src_rank);
  const int dst = absl::GetFlag(FLAGS_dst_rank);
  if (absl::GetFlag(FLAGS_address).empty() || size < 2 || src < 0 || dst < 0 || src >= size ||
      dst >= size || src == dst) {
    std::fprintf(stderr, "peer_dial_for_testing: need --address and 0 <= src != dst < size\n");
    return 2;
  }
  dtrain::comm::GrpcTransportOptions o;
  o.rank = src;
  o.size = size;
  o.listen_address = "127.0.0.1:0";
  o.job_id = absl::GetFlag(FLAGS_job_id);
  o.job_secret = absl::HexStringToBytes(absl::GetFlag(FLAGS_secret_hex));
  o.tune_malloc = false;
  if (!absl::GetFlag(FLAGS_tls_ca).empty()) {
    o.tls = dtrain::TlsFiles{absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                             absl::GetFlag(FLAGS_tls_key)};
  }
  auto transport = dtrain::comm::GrpcTransport::Start(o);
  if (!transport.ok()) {
    std::fprintf(stderr, "peer_dial_for_testing: %s\n", transport.status().ToString().c_str());
    return 2;
  }
  // Only the dialled rank's address matters; the others are never used.
  std::vector<std::string> addresses(size, "127.0.0.1:1");
  addresses[dst] = absl::GetFlag(FLAGS_address);
  if (absl::Status s = (*transport)->SetPeerAddresses(addresses); !s.ok()) {
    std::fprintf(stderr, "peer_dial_for_testing: %s\n", s.ToString().c_str());
    return 2;
  }
  const int peers[] = {dst};
  const absl::Status s =
      (*transport)->Connect(peers, absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  if (s.ok()) {
    std::printf("connected\n");
    return 0;
  }
  std::printf("refused: %s\n", s.ToString().c_str());
  return 1;
}
