// allreduce_benchmark: one rank of a dtrain collective benchmark over gRPC. Start one process
// per rank (tools/bench_allreduce.py does), all with the same --peers:
//
//   allreduce_benchmark --rank=0 --peers=127.0.0.1:7100,127.0.0.1:7101 --mode=allreduce
//
// Modes:
//   allreduce  ring all-reduce (sum) of each --sizes_mib; every rank prints one JSON line per
//              size: {"impl":"dtrain","rank":r,"ranks":n,"bytes":B,"iters":k,"time_us":t,
//              "cpu_us":c,"algbw_gbs":..,"busbw_gbs":..,"shared_buffers":b}: time and process
//              CPU (all threads)
//              per all-reduce, algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests'
//              definitions, docs/PERFORMANCE.md). The timed loop all-reduces zeros; a last,
//              checked all-reduce of rank+1 must give n(n+1)/2 everywhere.
//   p2p        rank 0 streams activations of each size to rank 1 (two sends in flight, as a
//              pipeline stage would); both print {"impl":"dtrain-p2p","rank":r,"bytes":B,
//              "gbs":..,...}: bytes per second, the receiver's being the result.
//   loop       all-reduces --loop_floats floats until an error, printing "iteration k" after
//              each; exits 1 with the error (the fault test kills one such rank).
//   memcpy     no ranks: this machine's memcpy bandwidth on buffers of each size (one thread,
//              source and destination out of cache), {"impl":"memcpy","bytes":B,"gbs":..}:
//              the ceiling of any same-host transport, measured in the same run as it.
// --allreduce=hierarchical: HierarchicalAllReduce with each rank's host from its --peers entry.
// --path: where the data goes. auto (the default, what a job does): when every rank is on this
// host (proved by SharedAllReduce's handshake), the all-reduce runs over buffers in one shared
// segment (collectives/allreduce_shared.h, zero-copy); else the ring, through shared-memory
// rings to ranks on this host and, to the others, (with --tls_dir) TLS data connections of the
// transport's own (grpc/tls_link.h), else the gRPC stream; shm: the ring through the
// shared-memory rings (failing unless every peer is reached through them), the path before
// shared buffers; grpc: the ring over the gRPC stream; sockets: the ring over the data
// connections (also on one host, also with plaintext streams). stderr says which one ran.
// --data_connections: data connections per peer pair (-1: as a job, 0: none, the stream).
// With --listen=127.0.0.1:0 the process prints "port N" first (its own --peers entry is then
// ignored by the others only if they learn N; the fault test does).
// With --tls_dir=DIR (a `dtrain certs init` directory) every stream is mutual TLS, as between
// workers: each rank presents DIR/worker.pem and verifies its peers against DIR/ca.pem
// (docs/PERFORMANCE.md, "TLS"); without it, plaintext.
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "worker/comm/collectives/allreduce_hierarchical.h"
#include "worker/comm/collectives/allreduce_ring.h"
#include "worker/comm/collectives/allreduce_shared.h"
#include "worker/comm/collectives/barrier.h"
#include "worker/comm/collectives/broadcast.h"
#include "worker/comm/grpc/grpc_transport.h"
#include "worker/comm/p2p.h"

ABSL_FLAG(int, rank, 0, "this process's rank");
ABSL_FLAG(std::string, peers, "", "host:port of every rank, comma-separated, in rank order");
ABSL_FLAG(std::string, listen, "", "listen address (default: the port of this rank's peer entry)");
ABSL_FLAG(std::string, mode, "allreduce", "allreduce, p2p or loop");
ABSL_FLAG(std::string, sizes_mib, "1,2,4,8,16,32,64", "message sizes in MiB, comma-separated");
ABSL_FLAG(double, seconds, 2.0, "time per size: iterations are chosen to fill about this");
ABSL_FLAG(int, min_iters, 5, "at least this many timed iterations per size");
ABSL_FLAG(int, warmup, 2, "untimed iterations per size");
ABSL_FLAG(int64_t, chunk_kib, 1024, "largest collective chunk (KiB)");
ABSL_FLAG(int64_t, frame_kib, 1024, "largest gRPC frame payload (KiB)");
ABSL_FLAG(int64_t, loop_floats, 1 << 18, "loop mode: floats per all-reduce");
ABSL_FLAG(std::string, grpc_args, "", "extra integer gRPC channel arguments: name=value,...");
ABSL_FLAG(double, timeout_s, 60, "deadline of every collective and connection (seconds)");
ABSL_FLAG(std::string, allreduce, "flat",
          "flat (the ring over all ranks) or hierarchical (inside each host of --peers first)");
ABSL_FLAG(std::string, path, "auto",
          "auto (as a job: shared memory on one host), shm, grpc or sockets");
ABSL_FLAG(int, data_connections, -1,
          "TLS data connections per peer pair across hosts (-1: as a job; 0: the gRPC stream)");
ABSL_FLAG(int64_t, shm_ring_kib, 4096, "shared-memory ring per ordered pair of ranks (KiB)");
ABSL_FLAG(std::string, tls_dir, "",
          "a `dtrain certs init` directory: mutual TLS with its worker certificate; empty: "
          "plaintext");

namespace dtrain::comm {
namespace {

absl::StatusOr<std::vector<int64_t>> ParseSizes() {
  std::vector<int64_t> bytes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mib), ',')) {
    double mib;
    if (!absl::SimpleAtod(s, &mib) || mib <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--sizes_mib: bad size '", s, "'"));
    }
    bytes.push_back(static_cast<int64_t>(mib * (1 << 20)) / 4 * 4);
  }
  return bytes;
}

// CPU seconds (user + system, all threads) this process has used.
double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Iterations that fill about --seconds, from the time of the warm-up iterations.
int ItersFor(absl::Duration per_iter) {
  const double target = absl::GetFlag(FLAGS_seconds);
  int iters = static_cast<int>(target / std::max(1e-6, absl::ToDoubleSeconds(per_iter)));
  return std::max(absl::GetFlag(FLAGS_min_iters), std::min(iters, 1000));
}

// The all-reduce --allreduce asks for: hierarchical takes each rank's host from its --peers
// entry (the address without the port, as the worker daemon does), so ranks of one host reduce
// among themselves first; flat (or one rank per host) is the ring.
absl::StatusOr<HierarchicalAllReduce> MakeAllReduce(Group& group) {
  const std::string algorithm = absl::GetFlag(FLAGS_allreduce);
  if (algorithm != "flat" && algorithm != "hierarchical") {
    return absl::InvalidArgumentError(
        absl::StrCat("--allreduce=", algorithm, ": flat or hierarchical"));
  }
  std::vector<std::string> hosts(group.size());
  if (algorithm == "hierarchical") {
    const std::vector<std::string> peers = absl::StrSplit(absl::GetFlag(FLAGS_peers), ',');
    for (int i = 0; i < group.size(); ++i) hosts[i] = peers[i].substr(0, peers[i].rfind(':'));
  }
  return HierarchicalAllReduce::Create(&group, hosts, /*local_id=*/3, /*leaders_id=*/4);
}

// With --path=auto and the flat all-reduce, buffers of `floats` shared by the group's members
// when they are all on this host (what a job's gradient buckets use), else null.
absl::StatusOr<std::unique_ptr<SharedAllReduce>> MakeShared(Group& group, int64_t floats) {
  if (absl::GetFlag(FLAGS_path) != "auto" || absl::GetFlag(FLAGS_allreduce) != "flat") {
    return nullptr;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> shared,
                   SharedAllReduce::Create(&group, std::max<int64_t>(1, floats)));
  fprintf(stderr, "rank %d: all-reduce %s\n", group.transport().rank(),
          shared->shared() ? "over shared buffers"
                           : absl::StrCat("through the ring: ", shared->why_not()).c_str());
  if (!shared->shared()) return nullptr;
  return shared;
}

// `floats` to all-reduce: in this rank's shared buffer, or in `own` (resized).
absl::Span<float> DataFor(SharedAllReduce* shared, int64_t floats, std::vector<float>& own) {
  if (shared != nullptr) return shared->buffer().subspan(0, floats);
  own.assign(floats, 0.0f);
  return absl::MakeSpan(own);
}

absl::Status RunAllReduce(GrpcTransport& t, Group& group, Group& control) {
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ParseSizes());
  const int n = group.size();
  ASSIGN_OR_RETURN(HierarchicalAllReduce hierarchical, MakeAllReduce(group));
  ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> shared,
                   MakeShared(group, *std::max_element(sizes.begin(), sizes.end()) / 4));
  auto all_reduce = [&](absl::Span<float> data) {
    return shared != nullptr ? shared->Run(data, ReduceOp::kSum)
                             : hierarchical.Run(data, ReduceOp::kSum);
  };
  std::vector<float> own;
  for (int64_t bytes : sizes) {
    const absl::Span<float> data = DataFor(shared.get(), bytes / 4, own);
    std::fill(data.begin(), data.end(), 0.0f);
    const int warmup = std::max(1, absl::GetFlag(FLAGS_warmup));
    RETURN_IF_ERROR(Barrier(control));
    absl::Time t0 = absl::Now();
    for (int i = 0; i < warmup; ++i) {
      RETURN_IF_ERROR(all_reduce(data));
    }
    // Every rank must run the same number of iterations: rank 0 decides, and tells the others.
    std::vector<float> iters_f = {static_cast<float>(ItersFor((absl::Now() - t0) / warmup))};
    RETURN_IF_ERROR(Broadcast(control, absl::MakeSpan(iters_f), 0));
    const int iters = static_cast<int>(iters_f[0]);
    RETURN_IF_ERROR(Barrier(control));
    const double cpu0 = CpuSeconds();
    t0 = absl::Now();
    for (int i = 0; i < iters; ++i) {
      RETURN_IF_ERROR(all_reduce(data));
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
    const double cpu = (CpuSeconds() - cpu0) / iters;
    // A checked all-reduce: rank r contributes r + 1.
    std::fill(data.begin(), data.end(), static_cast<float>(t.rank() + 1));
    RETURN_IF_ERROR(all_reduce(data));
    int64_t wrong = 0;
    for (float x : data) wrong += x != n * (n + 1) / 2.0f;
    if (wrong != 0) {
      return absl::InternalError(
          absl::StrCat(wrong, " wrong elements after all-reduce of ", bytes, " bytes"));
    }
    // Every rank reports its time and CPU per all-reduce; rank 0's time is the result.
    const double algbw = bytes / seconds / 1e9;
    printf(
        "{\"impl\":\"dtrain\",\"rank\":%d,\"ranks\":%d,\"bytes\":%lld,\"iters\":%d,"
        "\"time_us\":%.1f,\"cpu_us\":%.1f,\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,"
        "\"shared_buffers\":%s}\n",
        t.rank(), n, static_cast<long long>(bytes), iters, seconds * 1e6, cpu * 1e6, algbw,
        algbw * 2.0 * (n - 1) / n, shared != nullptr ? "true" : "false");
    fflush(stdout);
  }
  return absl::OkStatus();
}

absl::Status RunP2p(GrpcTransport& t, Group& control) {
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ParseSizes());
  const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  PipelineNeighbours neighbours;
  if (t.rank() == 0) neighbours.next = 1;
  if (t.rank() == 1) neighbours.prev = 0;
  StageLinks links(&t, neighbours, timeout);
  for (int64_t bytes : sizes) {
    const std::vector<int64_t> shape = {bytes / 4};
    std::vector<float> buffers[2] = {std::vector<float>(bytes / 4, 1.0f),
                                     std::vector<float>(bytes / 4, 2.0f)};
    // Count from the time of one message, as the all-reduce does.
    std::vector<float> iters_f = {0};
    if (t.rank() < 2) {
      RETURN_IF_ERROR(Barrier(control));
      const absl::Time t0 = absl::Now();
      if (t.rank() == 0) {
        ASSIGN_OR_RETURN(SendHandle h, links.SendActivation({-1, 0}, shape, buffers[0]));
        RETURN_IF_ERROR(links.Wait(h));
      } else {
        RETURN_IF_ERROR(links.RecvActivation({-1, 0}, shape, absl::MakeSpan(buffers[0])));
      }
      iters_f[0] = static_cast<float>(ItersFor(absl::Now() - t0));
    }
    RETURN_IF_ERROR(Broadcast(control, absl::MakeSpan(iters_f), 0));
    const int iters = static_cast<int>(iters_f[0]);
    RETURN_IF_ERROR(Barrier(control));
    const double cpu0 = CpuSeconds();
    const absl::Time t0 = absl::Now();
    if (t.rank() == 0) {
      SendHandle in_flight[2];
      for (int i = 0; i < iters; ++i) {
        RETURN_IF_ERROR(links.Wait(in_flight[i % 2]));  // the buffer is free again
        ASSIGN_OR_RETURN(in_flight[i % 2], links.SendActivation({i, 0}, shape, buffers[i % 2]));
      }
      for (SendHandle& h : in_flight) RETURN_IF_ERROR(links.Wait(h));
    } else if (t.rank() == 1) {
      for (int i = 0; i < iters; ++i) {
        RETURN_IF_ERROR(links.RecvActivation({i, 0}, shape, absl::MakeSpan(buffers[0])));
      }
    }
    if (t.rank() < 2) {
      // Both ends report; the receiver's time is the result (it ends when the last byte is in).
      const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
      printf(
          "{\"impl\":\"dtrain-p2p\",\"rank\":%d,\"bytes\":%lld,\"iters\":%d,"
          "\"time_us\":%.1f,\"cpu_us\":%.1f,\"gbs\":%.4f}\n",
          t.rank(), static_cast<long long>(bytes), iters, seconds / iters * 1e6,
          (CpuSeconds() - cpu0) / iters * 1e6, static_cast<double>(bytes) * iters / seconds / 1e9);
      fflush(stdout);
    }
  }
  return Barrier(control);
}

absl::Status RunMemcpy() {
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ParseSizes());
  for (int64_t bytes : sizes) {
    // Two pairs of buffers, used in turn, so that no copy reads what the last one left in cache.
    std::vector<char> a(bytes, 1), b(bytes, 2), c(bytes, 3), d(bytes, 4);
    memcpy(b.data(), a.data(), bytes);
    memcpy(d.data(), c.data(), bytes);
    const absl::Time w0 = absl::Now();
    memcpy(b.data(), a.data(), bytes);
    const int iters = ItersFor(absl::Now() - w0);
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < iters; ++i) {
      if (i % 2 == 0) {
        memcpy(b.data(), a.data(), bytes);
      } else {
        memcpy(d.data(), c.data(), bytes);
      }
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
    printf(
        "{\"impl\":\"memcpy\",\"rank\":0,\"bytes\":%lld,\"iters\":%d,\"time_us\":%.1f,"
        "\"gbs\":%.4f}\n",
        static_cast<long long>(bytes), iters, seconds * 1e6, bytes / seconds / 1e9);
    fflush(stdout);
  }
  return absl::OkStatus();
}

// --path=shm: every peer must be reached through shared memory.
absl::Status CheckPaths(GrpcTransport& t) {
  for (int peer = 0; peer < t.size(); ++peer) {  // which path each peer got, for the record
    if (peer != t.rank()) {
      fprintf(stderr, "rank %d -> rank %d: %s\n", t.rank(), peer, DataPathName(t.data_path(peer)));
    }
  }
  if (absl::GetFlag(FLAGS_path) != "shm") return absl::OkStatus();
  for (int peer = 0; peer < t.size(); ++peer) {
    if (peer != t.rank() && t.data_path(peer) != DataPath::kSharedMemory) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--path=shm: rank ", peer, " is reached over ", DataPathName(t.data_path(peer))));
    }
  }
  return absl::OkStatus();
}

absl::Status RunLoop(Group& group) {
  const int64_t floats = absl::GetFlag(FLAGS_loop_floats);
  ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> shared, MakeShared(group, floats));
  std::vector<float> own;
  const absl::Span<float> data = DataFor(shared.get(), floats, own);
  std::fill(data.begin(), data.end(), 1.0f);
  for (int64_t i = 0;; ++i) {
    RETURN_IF_ERROR(shared != nullptr ? shared->Run(data, ReduceOp::kMax)
                                      : AllReduce(group, data, ReduceOp::kMax));
    printf("iteration %lld\n", static_cast<long long>(i));
    fflush(stdout);
  }
}

absl::Status Run() {
  const std::string path = absl::GetFlag(FLAGS_path);
  if (path != "auto" && path != "shm" && path != "grpc" && path != "sockets") {
    return absl::InvalidArgumentError(
        absl::StrCat("--path=", path, ": auto, shm, grpc or sockets"));
  }
  if (absl::GetFlag(FLAGS_mode) == "memcpy") return RunMemcpy();
  GrpcTransportOptions options;
  options.shared_memory = path == "auto" || path == "shm";
  const int connections = absl::GetFlag(FLAGS_data_connections);
  options.data_connections = path == "grpc"      ? 0
                             : path != "sockets" ? connections
                             : connections < 0   ? kDefaultDataConnections
                                                 : connections;
  options.shm_ring_bytes = absl::GetFlag(FLAGS_shm_ring_kib) << 10;
  options.rank = absl::GetFlag(FLAGS_rank);
  options.peer_addresses = absl::StrSplit(absl::GetFlag(FLAGS_peers), ',');
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.job_id = "allreduce-benchmark";
  options.frame_bytes = absl::GetFlag(FLAGS_frame_kib) << 10;
  if (const std::string dir = absl::GetFlag(FLAGS_tls_dir); !dir.empty()) {
    options.tls =
        TlsFiles{.ca = dir + "/ca.pem", .cert = dir + "/worker.pem", .key = dir + "/worker.key"};
  }
  for (absl::string_view arg :
       absl::StrSplit(absl::GetFlag(FLAGS_grpc_args), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    int value;
    if (!absl::SimpleAtoi(kv.second, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("--grpc_args: bad entry '", arg, "'"));
    }
    options.channel_args.emplace_back(kv.first, value);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GrpcTransport> t, GrpcTransport::Start(options));
  if (!options.listen_address.empty()) {
    printf("port %d\n", t->port());
    fflush(stdout);
  }
  const int n = t->size();
  CollectiveOptions collective;
  collective.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  collective.chunk_bytes = absl::GetFlag(FLAGS_chunk_kib) << 10;
  std::vector<int> ranks(n);
  for (int r = 0; r < n; ++r) ranks[r] = r;
  ASSIGN_OR_RETURN(Group group, Group::Create(t.get(), ranks, 1, collective));
  ASSIGN_OR_RETURN(Group control, Group::Create(t.get(), ranks, 2, collective));
  // Every pair connected (and its path chosen) before anything is timed, as a worker does.
  std::vector<int> peers;
  for (int r = 0; r < n; ++r) {
    if (r != t->rank()) peers.push_back(r);
  }
  RETURN_IF_ERROR(t->Connect(peers, absl::Now() + collective.timeout));
  RETURN_IF_ERROR(CheckPaths(*t));
  const std::string mode = absl::GetFlag(FLAGS_mode);
  absl::Status status;
  if (mode == "allreduce") {
    status = RunAllReduce(*t, group, control);
  } else if (mode == "p2p") {
    status = n < 2 ? absl::InvalidArgumentError("p2p needs 2 ranks") : RunP2p(*t, control);
  } else if (mode == "loop") {
    status = RunLoop(group);
  } else {
    status = absl::InvalidArgumentError(absl::StrCat("--mode=", mode));
  }
  // Leave together. A rank may leave the barrier while another still waits for its last
  // message from a third: the one that left shuts its transport down cleanly (GOODBYE,
  // proto/peer.proto), which does not fail the others' waits.
  if (status.ok()) status = Barrier(control);
  return status;
}

}  // namespace
}  // namespace dtrain::comm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles (a debug aid).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::Status status = dtrain::comm::Run();
  if (!status.ok()) {
    fprintf(stderr, "allreduce_benchmark: rank %d: %s\n", absl::GetFlag(FLAGS_rank),
            status.ToString().c_str());
    return 1;
  }
  return 0;
}
