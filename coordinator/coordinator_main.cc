// dtrain-coordinator: the coordinator daemon. See coordinator/README.md.
//
//   dtrain-coordinator --listen=0.0.0.0:7070 --db=/var/lib/dtrain/coordinator.db --lease=10s
//
// Prometheus metrics (coordinator/README.md lists them) on --metrics_listen: GET /metrics and
// GET /healthz.
//
// Mutual TLS (common/daemon_tls.h): --tls_ca, --tls_cert, --tls_key, or an explicit --insecure.
//
// Exit status 0 after SIGTERM or SIGINT (in-flight calls finished, watches ended, database
// closed); 2 without TLS files or --insecure (or with bad ones); 1 when it cannot start
// otherwise (database unusable, address in use, an explicit --metrics_listen that cannot be
// bound), with the reason on stderr.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/certificate_watch.h"
#include "common/daemon_tls.h"
#include "common/metrics/http_exporter.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/registry.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "common/version.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/diagnose_job.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_store.h"
#include "plan/job_plan.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7070", "address:port the gRPC service listens on");
ABSL_FLAG(std::string, db, "dtrain-coordinator.db",
          "SQLite file holding jobs, their history and metrics (created when missing)");
ABSL_FLAG(absl::Duration, lease, absl::Seconds(10),
          "a worker that sends no heartbeat for this long is marked lost and its job fails");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1),
          "how often workers are told to heartbeat; must be well below --lease");
ABSL_FLAG(double, max_heartbeat_rate, 10000,
          "heartbeats a second the live workers may send in all: beyond, the heartbeat interval "
          "and the lease grow in proportion to the cluster (50,000 workers at the default: every "
          "5s, lease 5x --lease for --heartbeat_interval=1s); 0: never");
// The default is best-effort: when its port is taken (a second coordinator on this machine)
// the coordinator starts without metrics and says so; any other address must work.
constexpr char kDefaultMetricsListen[] = "0.0.0.0:9464";
ABSL_FLAG(std::string, metrics_listen, kDefaultMetricsListen,
          "HOST:PORT (numeric IPv4 HOST) or :PORT serving Prometheus metrics on /metrics and "
          "/healthz; empty: no metrics endpoint");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(5),
          "on SIGTERM, how long in-flight calls may take before they are cancelled");
// What one request may cost (plan/job_plan.h JobLimits, watch_limiter.h): refusals are
// INVALID_ARGUMENT or RESOURCE_EXHAUSTED naming the flag.
ABSL_FLAG(int64_t, max_spec_bytes, 1 << 20, "largest job spec SubmitJob accepts, in bytes");
ABSL_FLAG(int64_t, max_job_parameters, dtrain::plan::JobLimits().max_parameters,
          "largest model (parameters) a job may ask for");
ABSL_FLAG(int64_t, max_job_steps, dtrain::plan::JobLimits().max_steps,
          "most steps a job may ask for");
ABSL_FLAG(int64_t, max_job_workers, dtrain::plan::JobLimits().max_workers,
          "most workers (parallel.dp*pp*tp) a job may ask for");
ABSL_FLAG(int, max_watches_per_client, 16,
          "most WatchJob/JobLogs streams one client (certificate name, else address) holds "
          "open at once; 0: no cap");
ABSL_FLAG(absl::Duration, queue_reservation, absl::Minutes(10),
          "a queued job that has waited this long, while enough live workers exist to run it, "
          "holds back the jobs behind it that would take the same workers, so that the workers "
          "freed go to it (smaller jobs pass a waiting one until then); 0: never");
ABSL_FLAG(int64_t, max_workers_per_owner, 0,
          "the most workers one owner's placed jobs may hold at once (the owner: the CN of the "
          "certificate that submitted them); a queued job that would pass it waits, one that "
          "needs more is refused; 0: no cap");
ABSL_FLAG(int32_t, max_user_priority, 0,
          "the highest job priority (-100..100) a caller other than an admin may submit: a "
          "user's job above the others' would pass the queue's fair share");
ABSL_FLAG(absl::Duration, preempt_after, absl::ZeroDuration(),
          "a queued job that has waited this long for workers preempts running jobs of a lower "
          "priority, each at its next sealed checkpoint: they yield their workers, wait in the "
          "queue and resume from that checkpoint (no step lost, no restart counted); a "
          "checkpoint every rank skips (a full disk) lets the preemption go ahead from the "
          "latest sealed one; 0: never");
ABSL_FLAG(absl::Duration, ended_job_retention, absl::ZeroDuration(),
          "delete ended jobs this long after they ended: their records and their directory "
          "(checkpoints, final weights), as `dtrain delete --files` does, except one whose "
          "checkpoints a job not yet ended uses (e.g. 720h: 30 days); 0: keep them until "
          "deleted by hand");
ABSL_FLAG(absl::Duration, diagnose_stall_after, absl::Seconds(30),
          "a running multi-worker job with no step for this long is diagnosed as `dtrain "
          "diagnose` would (once per stall): the answer goes into its events and, if the run "
          "then fails, its reason; 0: never");

namespace {

using dtrain::coordinator::CoordinatorMetrics;
using dtrain::coordinator::CoordinatorService;
using dtrain::coordinator::JobManager;
using dtrain::coordinator::JobStore;

volatile std::sig_atomic_t g_signal = 0;

extern "C" void OnSignal(int signal) { g_signal = signal; }

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "dtrain-coordinator: error: %s\n", std::string(status.message()).c_str());
  return 1;
}

// --help lists this file's flags (absl's default looks for a file named after the binary).
void SetUsage() {
  absl::FlagsUsageConfig usage;
  usage.version_string = [] { return dtrain::VersionText("dtrain-coordinator") + "\n"; };
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "coordinator/coordinator_main.cc") ||
           absl::EndsWith(file, "common/daemon_tls.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "dtrain-coordinator --listen=HOST:PORT --db=FILE (--tls_ca=CA --tls_cert=CERT "
      "--tls_key=KEY | --insecure) [--lease=10s] [--heartbeat_interval=1s] "
      "[--metrics_listen=0.0.0.0:9464]");
}

absl::Status CheckLease(absl::Duration lease, absl::Duration interval) {
  if (lease <= absl::ZeroDuration() || interval <= absl::ZeroDuration() || interval >= lease) {
    return absl::InvalidArgumentError(
        absl::StrCat("--heartbeat_interval=", absl::FormatDuration(interval),
                     " must be positive and below --lease=", absl::FormatDuration(lease)));
  }
  return absl::OkStatus();
}

// The TLS files' expiry gauges (re-read when the files change) and the process's own metrics.
absl::StatusOr<std::unique_ptr<dtrain::CertificateWatch>> ExportDaemonMetrics(
    const dtrain::TlsFiles& tls, dtrain::metrics::Registry* registry) {
  RETURN_IF_ERROR(dtrain::ExportTlsMetric(tls, "coordinator", registry));
  ASSIGN_OR_RETURN(std::unique_ptr<dtrain::CertificateWatch> watch,
                   dtrain::CertificateWatch::Start(tls, "dtrain-coordinator", registry));
  RETURN_IF_ERROR(dtrain::metrics::ExportProcessMetrics(registry));
  return watch;
}

// The store, locked by this process (the lock names it: pid, host, address).
absl::StatusOr<std::unique_ptr<JobStore>> OpenStore() {
  char host[256] = "unknown";
  gethostname(host, sizeof(host) - 1);
  return JobStore::Open(absl::GetFlag(FLAGS_db),
                        absl::StrCat("pid ", getpid(), " on host ", host, ", listening on ",
                                     absl::GetFlag(FLAGS_listen)));
}

// A stalled job's diagnosis: every rank's flight recorder gathered over the peer service, then
// analysed once every rank answered or not, with the ranks that timed out by then.
decltype(JobManager::Options::diagnose) DiagnoseOverPeers(const dtrain::TlsFiles& tls,
                                                          absl::Duration deadline) {
  return [tls, deadline](const dtrain::Job& job, const dtrain::ListWorkersResponse& workers,
                         std::function<std::vector<dtrain::coordinator::TimedOutRank>()> timed_out,
                         std::function<void(std::string)> done) {
    dtrain::coordinator::GatherOptions gather;
    gather.tls = tls;
    gather.deadline = deadline;
    dtrain::coordinator::DiagnosisOptions analysis = gather.analysis;
    analysis.deadline = deadline;
    absl::Status started = dtrain::coordinator::StartGathering(
        job, workers.workers(), gather, [analysis, timed_out, done](dtrain::JobDiagnosis d) {
          dtrain::coordinator::DiagnosisOptions o = analysis;
          o.timed_out = timed_out();
          done(dtrain::coordinator::Analyse(std::move(d), o).summary());
        });
    if (!started.ok()) done(absl::StrCat("cannot diagnose: ", started.message()));
  };
}

JobManager::Options ManagerOptionsFromFlags(const dtrain::TlsFiles& tls,
                                            CoordinatorMetrics* metrics) {
  JobManager::Options options;
  options.lease = absl::GetFlag(FLAGS_lease);
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.max_heartbeat_rate = absl::GetFlag(FLAGS_max_heartbeat_rate);
  options.metrics = metrics;
  options.max_spec_bytes = absl::GetFlag(FLAGS_max_spec_bytes);
  options.job_limits.max_parameters = absl::GetFlag(FLAGS_max_job_parameters);
  options.job_limits.max_steps = absl::GetFlag(FLAGS_max_job_steps);
  options.job_limits.max_workers = absl::GetFlag(FLAGS_max_job_workers);
  options.diagnose_stall_after = absl::GetFlag(FLAGS_diagnose_stall_after);
  options.queue_reservation =
      std::max(absl::ZeroDuration(), absl::GetFlag(FLAGS_queue_reservation));
  options.max_workers_per_owner = std::max<int64_t>(0, absl::GetFlag(FLAGS_max_workers_per_owner));
  options.max_user_priority = absl::GetFlag(FLAGS_max_user_priority);
  options.preempt_after = std::max(absl::ZeroDuration(), absl::GetFlag(FLAGS_preempt_after));
  options.ended_job_retention =
      std::max(absl::ZeroDuration(), absl::GetFlag(FLAGS_ended_job_retention));
  options.diagnose = DiagnoseOverPeers(tls, options.diagnosis_deadline);
  return options;
}

// The /metrics endpoint, or null: none asked for (empty --metrics_listen), or the default
// address taken (a warning: a second coordinator on this machine). An explicit address that
// cannot be bound is an error.
absl::StatusOr<std::unique_ptr<dtrain::metrics::MetricsServer>> StartMetricsServer(
    const std::string& listen, dtrain::metrics::Registry* registry) {
  if (listen.empty()) return nullptr;
  auto started = dtrain::metrics::MetricsServer::Start(listen, registry);
  if (started.ok() || listen != kDefaultMetricsListen) return started;
  std::fprintf(stderr,
               "dtrain-coordinator: warning: %s; running without metrics "
               "(choose another --metrics_listen, or --metrics_listen= to silence this)\n",
               std::string(started.status().message()).c_str());
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  SetUsage();
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built without NDEBUG, so each Mutex::Lock also updates a lock graph under
  // one process-wide spin lock (GraphCycles::GetId: 3 % of the coordinator's CPU at 50,000
  // workers, and a lock every gRPC thread takes): the daemon leaves deadlock detection to tests.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Before anything slow, so a signal during startup still ends in a clean shutdown.
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  absl::StatusOr<dtrain::TlsFiles> tls = dtrain::TlsFilesFromFlags("the coordinator");
  if (!tls.ok()) {
    Fail(tls.status());
    return dtrain::kExitTlsUsage;
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      dtrain::ServerCredentials(*tls);
  if (!credentials.ok()) return Fail(credentials.status());
  const absl::Duration lease = absl::GetFlag(FLAGS_lease);
  if (absl::Status s = CheckLease(lease, absl::GetFlag(FLAGS_heartbeat_interval)); !s.ok()) {
    return Fail(s);
  }

  // Declared before the manager and the servers, so destroyed after them.
  dtrain::metrics::Registry registry;
  absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics =
      CoordinatorMetrics::Create(&registry);
  if (!metrics.ok()) return Fail(metrics.status());
  absl::StatusOr<std::unique_ptr<dtrain::CertificateWatch>> certificate_watch =
      ExportDaemonMetrics(*tls, &registry);
  if (!certificate_watch.ok()) return Fail(certificate_watch.status());

  absl::StatusOr<std::unique_ptr<JobStore>> store = OpenStore();
  if (!store.ok()) return Fail(store.status());
  absl::StatusOr<std::unique_ptr<JobManager>> manager =
      JobManager::Create(std::move(*store), ManagerOptionsFromFlags(*tls, metrics->get()));
  if (!manager.ok()) return Fail(manager.status());

  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  absl::StatusOr<std::unique_ptr<dtrain::metrics::MetricsServer>> metrics_server =
      StartMetricsServer(metrics_listen, &registry);
  if (!metrics_server.ok()) return Fail(metrics_server.status());

  CoordinatorService service(manager->get(), absl::GetFlag(FLAGS_max_watches_per_client));
  service.set_peer_tls(*tls);  // Diagnose asks the workers' peer services
  auto server = dtrain::coordinator::StartServer(
      absl::GetFlag(FLAGS_listen), &service, (*metrics)->NewRpcInterceptorFactory(), *credentials);
  if (!server.ok()) return Fail(server.status());
  (*manager)->Start();
  dtrain::AnnounceTls(*tls, "dtrain-coordinator", absl::GetFlag(FLAGS_listen));
  const std::string metrics_where =
      *metrics_server != nullptr
          ? absl::StrCat("metrics on ", metrics_listen, " (port ", (*metrics_server)->port(), ")")
          : "no metrics";
  std::fprintf(stderr, "dtrain-coordinator: listening on %s (port %d), %s, db %s, lease %s\n",
               absl::GetFlag(FLAGS_listen).c_str(), server->port, metrics_where.c_str(),
               absl::GetFlag(FLAGS_db).c_str(), absl::FormatDuration(lease).c_str());

  // The handler only sets a flag; poll it (no work happens on this thread otherwise).
  while (g_signal == 0) absl::SleepFor(absl::Milliseconds(100));

  std::fprintf(stderr, "dtrain-coordinator: signal %d: shutting down\n",
               static_cast<int>(g_signal));
  service.Shutdown();  // end watches so Shutdown below does not wait for them
  server->server->Shutdown(absl::ToChronoTime(absl::Now() + absl::GetFlag(FLAGS_shutdown_grace)));
  server->server->Wait();
  metrics_server->reset();
  (*manager)->Stop();
  manager->reset();  // closes the database
  std::fprintf(stderr, "dtrain-coordinator: stopped\n");
  return 0;
}
