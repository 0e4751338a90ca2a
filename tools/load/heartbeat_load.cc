// heartbeat_load: load test of the coordinator. Registers N simulated workers over real gRPC,
// heartbeats each of them once per --interval (phases spread evenly over the interval), measures
// the heartbeat latency (p50/p90/p99/max) over --duration, then submits jobs of the given layouts
// and measures how long the coordinator takes to place each (submit -> PLACING).
//
//   heartbeat_load --coordinator_binary=bazel-bin/coordinator/dtrain-coordinator --workers=1000
//   heartbeat_load --coordinator=127.0.0.1:7070 --workers=100 --layouts=6x4x4
//   heartbeat_load --coordinator_binary=... --workers=1000 --tls_dir=certs   # mutual TLS
//   heartbeat_load --coordinator_binary=... --workers=50000 --connections=500 --interval=5s
//       --lease=50s --layouts=64x16x4                 # (one line) 50,000 workers, 4,096 ranks
//
// With --tls_dir (a `dtrain certs init` directory) every call is mutual TLS, as in a secure
// deployment: the coordinator this tool starts presents DIR/coordinator.pem, the simulated
// workers DIR/worker.pem (the shared worker certificate, each on its own connection, so each
// pays its own handshake) and the submits and cancels DIR/admin.pem.
//
// The simulated workers behave as real ones towards the coordinator: one connection each (unless
// --shared_channel or --connections: 50,000 workers need --connections, their sockets would not
// fit one machine twice), they heartbeat at the interval the coordinator's answers give (its
// pace grows with the cluster: coordinator/heartbeat_pace.h), 8 per host label, they acknowledge an
// assignment by reporting the job in their next heartbeat and drop it when told to cancel; they
// never train. Each job is cancelled once measured. A layout needing more workers than there are is
// reported as not placeable (with the coordinator's QUEUED reason). Ends with one "RESULT key=value
// ..." line per layout for tools/bench_coordinator.sh. Exit 1 when the coordinator cannot be
// started or reached.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "tools/load/latency_stats.h"

ABSL_FLAG(std::string, coordinator, "",
          "host:port of a running coordinator; empty: start --coordinator_binary");
ABSL_FLAG(std::string, coordinator_binary, "",
          "dtrain-coordinator to start on a free loopback port with a fresh database");
ABSL_FLAG(absl::Duration, lease, absl::Seconds(10), "--lease of a coordinator this tool starts");
ABSL_FLAG(int, workers, 100, "simulated workers");
ABSL_FLAG(int, workers_per_host, 8, "simulated workers per host label");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(1), "heartbeat interval of each worker");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(3), "heartbeats before the measurement window");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(20), "heartbeat measurement window");
ABSL_FLAG(std::vector<std::string>, layouts, std::vector<std::string>({"32x4x4"}),
          "jobs to place one after another, DPxPPxTP each (32x4x4 = 512 ranks)");
ABSL_FLAG(bool, shared_channel, false,
          "all workers on one connection (default: one connection each, as real workers)");
ABSL_FLAG(int, connections, 0,
          "spread the workers over this many connections (0: one each, as real workers); for "
          "tens of thousands of workers, whose connections one machine cannot hold twice");
ABSL_FLAG(int, register_threads, 8, "registrations in flight at once");
ABSL_FLAG(double, max_heartbeat_rate, -1,
          "--max_heartbeat_rate of a coordinator this tool starts (-1: its default)");
ABSL_FLAG(absl::Duration, rpc_timeout, absl::Seconds(5), "deadline of every call");
ABSL_FLAG(std::string, tls_dir, "",
          "a `dtrain certs init` directory: mutual TLS on every call (coordinator.pem for a "
          "coordinator this tool starts, worker.pem for the simulated workers, admin.pem for "
          "submits); empty: plaintext");

namespace dtrain::load {
namespace {

using Clock = std::chrono::steady_clock;

double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::chrono::system_clock::time_point Deadline(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  return Annotate(FromGrpcStatus(s), what);
}

// utime + stime of a process in seconds; 0 when unreadable.
double ProcessCpuSeconds(pid_t pid) {
  std::FILE* f = std::fopen(absl::StrCat("/proc/", pid, "/stat").c_str(), "r");
  if (f == nullptr) return 0;
  char buf[4096];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // Fields after the command name (which may hold spaces) start after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  std::vector<std::string> fields = absl::StrSplit(p + 2, ' ');
  // state is field 3 of the whole line, so utime (14) and stime (15) are at 11 and 12 here.
  unsigned long long utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return 0;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The files of certificate NAME ("worker", "admin", ...) in --tls_dir; insecure without it.
TlsFiles TlsFilesFor(const std::string& name) {
  const std::string dir = absl::GetFlag(FLAGS_tls_dir);
  if (dir.empty()) return TlsFiles{.insecure = true};
  return TlsFiles{
      .ca = dir + "/ca.pem", .cert = dir + "/" + name + ".pem", .key = dir + "/" + name + ".key"};
}

// A coordinator child process on a free loopback port, with its own database and log in a
// temporary folder; SIGTERM on destruction.
class CoordinatorProcess {
 public:
  // `max_job_workers`: its --max_job_workers (the largest job to place).
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(const std::string& binary,
                                                                   absl::Duration lease,
                                                                   int max_job_workers) {
    char dir_template[] = "/tmp/dtrain-load-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
    const std::string dir = dir_template;
    // The kernel's pick of a free port; the coordinator binds it a moment later.
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return absl::InternalError("cannot find a free loopback port");
    }
    close(fd);
    auto p = std::unique_ptr<CoordinatorProcess>(new CoordinatorProcess);
    p->address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
    p->log_ = dir + "/coordinator.log";
    std::vector<std::string> args = {
        binary, "--listen=" + p->address_, "--db=" + dir + "/coordinator.db",
        "--lease=" + absl::FormatDuration(lease),
        "--heartbeat_interval=" + absl::FormatDuration(absl::GetFlag(FLAGS_interval)),
        absl::StrCat("--max_job_workers=", max_job_workers),
        // No metrics endpoint: the default port (9464) is shared by whatever else runs here.
        "--metrics_listen="};
    if (absl::GetFlag(FLAGS_max_heartbeat_rate) >= 0) {
      args.push_back(
          absl::StrCat("--max_heartbeat_rate=", absl::GetFlag(FLAGS_max_heartbeat_rate)));
    }
    const TlsFiles tls = TlsFilesFor("coordinator");
    if (tls.enabled()) {
      args.insert(args.end(),
                  {"--tls_ca=" + tls.ca, "--tls_cert=" + tls.cert, "--tls_key=" + tls.key});
    } else {
      args.push_back("--insecure");  // the coordinator refuses to start with neither
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    p->pid_ = fork();
    if (p->pid_ < 0) return absl::InternalError("fork failed");
    if (p->pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // the coordinator goes when this tool goes
      const int log = open(p->log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (log >= 0) {
        dup2(log, STDOUT_FILENO);
        dup2(log, STDERR_FILENO);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    return p;
  }

  ~CoordinatorProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

  const std::string& address() const { return address_; }
  const std::string& log() const { return log_; }

  // CPU seconds (user + system) the coordinator has used so far, from /proc/<pid>/stat.
  double CpuSeconds() const { return ProcessCpuSeconds(pid_); }

 private:
  CoordinatorProcess() = default;
  pid_t pid_ = -1;
  std::string address_;
  std::string log_;
};

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, int index,
                                          std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  // A private subchannel pool gives each simulated worker its own TCP connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("dtrain.load.worker", index);  // distinct args: no channel sharing either
  return grpc::CreateCustomChannel(address, std::move(creds), args);
}

struct SimWorker {
  int index = 0;
  std::string id, session, host;
  std::unique_ptr<Coordinator::Stub> stub;
  std::atomic<bool> in_flight{false};
  std::atomic<bool> must_register{false};
  absl::Mutex mu;
  std::string running_job ABSL_GUARDED_BY(mu);
};

struct Counters {
  std::atomic<int64_t> sent{0}, ok{0}, errors{0}, skipped{0}, assignments{0}, cancels{0},
      register_again{0};
  // The largest assignment a heartbeat answer carried (its JobAssignment's encoded bytes), and
  // when the last assignment arrived (steady clock, ns since its epoch).
  std::atomic<int64_t> assignment_bytes_max{0}, last_assignment_ns{0};
};

class Fleet {
 public:
  // `creds`: every simulated worker's (one worker certificate, or insecure).
  Fleet(const std::string& address, int n, int per_host, absl::Duration interval,
        const std::shared_ptr<grpc::ChannelCredentials>& creds)
      : address_(address), interval_(interval) {
    // One channel per worker, or `connections` (one with --shared_channel) shared round robin.
    const int connections =
        absl::GetFlag(FLAGS_shared_channel) ? 1 : absl::GetFlag(FLAGS_connections);
    std::vector<std::shared_ptr<grpc::Channel>> shared;
    for (int c = 0; c < connections; ++c) shared.push_back(NewChannel(address, -1 - c, creds));
    for (int i = 0; i < n; ++i) {
      auto w = std::make_unique<SimWorker>();
      w->index = i;
      w->id = absl::StrFormat("sim-%05d", i);
      w->session = absl::StrFormat("load-%d-%05d", getpid(), i);
      w->host = absl::StrFormat("simhost-%04d", i / per_host);
      w->stub = Coordinator::NewStub(shared.empty() ? NewChannel(address, i, creds)
                                                    : shared[i % shared.size()]);
      workers_.push_back(std::move(w));
    }
  }

  ~Fleet() { StopHeartbeats(); }

  absl::Status Register(SimWorker& w) {
    RegisterWorkerRequest req;
    req.set_worker_id(w.id);
    req.set_session_id(w.session);
    req.set_address(absl::StrCat("127.0.0.1:", 20000 + w.index));
    req.set_host_label(w.host);
    req.mutable_device()->set_kind("cpu");
    req.mutable_device()->set_name("simulated");
    {
      absl::MutexLock lock(&w.mu);
      req.set_running_job_id(w.running_job);
    }
    RegisterWorkerResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::GetFlag(FLAGS_rpc_timeout)));
    ctx.set_wait_for_ready(true);
    return FromGrpc(w.stub->RegisterWorker(&ctx, req, &resp), "RegisterWorker " + w.id);
  }

  // Registers every worker, register_threads at a time; the first error.
  absl::Status RegisterAll() {
    std::atomic<int> next{0};
    absl::Mutex mu;
    absl::Status first;
    std::vector<std::thread> threads;
    for (int t = 0; t < std::max(1, absl::GetFlag(FLAGS_register_threads)); ++t) {
      threads.emplace_back([&] {
        for (int i = next++; i < size(); i = next++) {
          absl::Status s = Register(*workers_[i]);
          absl::MutexLock lock(&mu);
          if (!s.ok() && first.ok()) first = s;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return first;
  }

  // The interval the coordinator told the workers last (its pace: heartbeat_pace.h); 0: none.
  absl::Duration told_interval() const { return absl::Milliseconds(told_interval_ms_.load()); }
  // The interval the workers heartbeat at now: --interval, or the coordinator's pace once told.
  absl::Duration interval() const { return absl::Nanoseconds(interval_ns_.load()); }

  void StartHeartbeats() {
    scheduler_ = std::thread([this] { Schedule(); });
    reregister_ = std::thread([this] { Reregister(); });
  }

  void StopHeartbeats() {
    if (stop_.exchange(true)) return;
    if (scheduler_.joinable()) scheduler_.join();
    if (reregister_.joinable()) reregister_.join();
    // Let in-flight heartbeats finish before their workers go away.
    for (int i = 0; i < 500 && InFlight() > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  }

  int InFlight() const {
    int n = 0;
    for (const auto& w : workers_) n += w->in_flight ? 1 : 0;
    return n;
  }

  int Running(const std::string& job_id) {
    int n = 0;
    for (auto& w : workers_) {
      absl::MutexLock lock(&w->mu);
      n += w->running_job == job_id ? 1 : 0;
    }
    return n;
  }

  int size() const { return static_cast<int>(workers_.size()); }
  // Heartbeats without an assignment in their response; those with one are in assign_latency().
  LatencyStats& latency() { return latency_; }
  LatencyStats& assign_latency() { return assign_latency_; }
  Counters& counters() { return counters_; }

 private:
  // Fires worker i's k-th heartbeat at start + k*interval + i*interval/N.
  // The workers follow the coordinator's pace: a new interval told in the answers applies from
  // the next round on.
  void Schedule() {
    const int n = size();
    auto start = Clock::now();
    auto interval = absl::ToChronoNanoseconds(interval_);
    int64_t round = 0;
    int i = 0;
    while (!stop_) {
      const absl::Duration told = absl::Milliseconds(told_interval_ms_.load());
      if (i == 0 && told > absl::ZeroDuration() && told != absl::FromChrono(interval)) {
        start = start + round * interval;
        round = 0;
        interval = absl::ToChronoNanoseconds(told);
        interval_ns_ = absl::ToInt64Nanoseconds(told);
      }
      const auto due = start + round * interval + interval * i / n;
      const auto now = Clock::now();
      if (due > now) {
        std::this_thread::sleep_until(std::min(due, now + std::chrono::milliseconds(5)));
        continue;
      }
      Fire(*workers_[i]);
      if (++i == n) {
        i = 0;
        ++round;
      }
    }
  }

  struct Call {
    grpc::ClientContext ctx;
    HeartbeatRequest req;
    HeartbeatResponse resp;
    Clock::time_point start;
  };

  void Fire(SimWorker& w) {
    if (w.must_register) return;
    if (w.in_flight.exchange(true)) {
      ++counters_.skipped;  // the previous heartbeat has not returned within an interval
      return;
    }
    auto* call = new Call;
    call->req.set_worker_id(w.id);
    call->req.set_session_id(w.session);
    {
      absl::MutexLock lock(&w.mu);
      call->req.set_running_job_id(w.running_job);
    }
    call->ctx.set_deadline(Deadline(absl::GetFlag(FLAGS_rpc_timeout)));
    call->start = Clock::now();
    ++counters_.sent;
    w.stub->async()->Heartbeat(&call->ctx, &call->req, &call->resp,
                               [this, call, &w](grpc::Status status) {
                                 OnHeartbeat(w, *call, status);
                                 delete call;
                               });
  }

  void OnHeartbeat(SimWorker& w, const Call& call, const grpc::Status& status) {
    const double ms = MillisSince(call.start);
    if (!status.ok()) {
      ++counters_.errors;
      w.in_flight = false;
      return;
    }
    ++counters_.ok;
    const HeartbeatResponse& r = call.resp;
    (r.has_assignment() ? assign_latency_ : latency_).Add(ms);
    if (r.heartbeat_interval_ms() > 0) told_interval_ms_ = r.heartbeat_interval_ms();
    if (r.has_assignment()) {
      const int64_t bytes = static_cast<int64_t>(r.assignment().ByteSizeLong());
      int64_t seen = counters_.assignment_bytes_max;
      while (bytes > seen && !counters_.assignment_bytes_max.compare_exchange_weak(seen, bytes)) {
      }
      counters_.last_assignment_ns = Clock::now().time_since_epoch().count();
    }
    {
      absl::MutexLock lock(&w.mu);
      if (r.has_assignment()) {
        ++counters_.assignments;
        w.running_job = r.assignment().job_id();
      }
      for (const std::string& id : r.cancel_job_ids()) {
        ++counters_.cancels;
        if (w.running_job == id) w.running_job.clear();
      }
    }
    if (r.register_again()) {
      ++counters_.register_again;
      w.must_register = true;
    }
    w.in_flight = false;
  }

  // Workers the coordinator asked to register again (it lost their session) do so here, off the
  // gRPC callback threads.
  void Reregister() {
    while (!stop_) {
      for (auto& w : workers_) {
        if (w->must_register && !w->in_flight) {
          if (Register(*w).ok()) w->must_register = false;
        }
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
  }

  const std::string address_;
  const absl::Duration interval_;
  std::atomic<int64_t> told_interval_ms_{0};
  std::atomic<int64_t> interval_ns_{absl::ToInt64Nanoseconds(interval_)};
  std::vector<std::unique_ptr<SimWorker>> workers_;
  LatencyStats latency_, assign_latency_;
  Counters counters_;
  std::atomic<bool> stop_{false};
  std::thread scheduler_, reregister_;
};

struct Layout {
  int dp = 1, pp = 1, tp = 1;
  int ranks() const { return dp * pp * tp; }
  std::string name() const { return absl::StrCat(dp, "x", pp, "x", tp); }
};

absl::StatusOr<Layout> ParseLayout(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, 'x');
  Layout l;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &l.dp) ||
      !absl::SimpleAtoi(parts[1], &l.pp) || !absl::SimpleAtoi(parts[2], &l.tp) || l.dp < 1 ||
      l.pp < 1 || l.tp < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--layouts: '", text, "' is not DPxPPxTP"));
  }
  return l;
}

// A job the coordinator accepts for `layout`: n_head and n_layer divisible by tp and pp, a batch
// divisible by dp. It never trains (the workers are simulated), so the dataset is not read.
std::string SpecJson(const Layout& l) {
  const int n_head = 4 * l.tp;
  return absl::StrFormat(
      R"({"name": "load %s", "model": {"vocab_size": 256, "context": 64, "n_layer": %d, )"
      R"("n_head": %d, "n_embd": %d}, "dataset": "/dev/null", "steps": 1000, )"
      R"("batch_size": %d, "parallel": {"dp": %d, "pp": %d, "tp": %d}, "device": "cpu", )"
      R"("checkpoint": {"dir": "/tmp/dtrain-load"}})",
      l.name(), 2 * l.pp, n_head, 16 * n_head, 4 * l.dp, l.dp, l.pp, l.tp);
}

struct PlaceResult {
  bool placed = false;
  std::string reason;            // when not placed: the coordinator's QUEUED reason
  double submit_ms = 0;          // SubmitJob round trip
  double placing_ms = -1;        // submit sent -> PLACING seen by a watcher
  double placing_coord_ms = -1;  // PLACING time - submitted time, both on the coordinator's clock
  double running_ms = -1;        // submit sent -> RUNNING (every rank acknowledged by heartbeat)
  double delivered_ms = -1;      // PLACING seen -> the last rank's assignment received
  int64_t assignment_bytes = 0;  // the largest assignment one rank was sent
  Summary heartbeats;            // heartbeat latency while placing, without an assignment
  Summary assigning;             // heartbeats whose response carried an assignment
};

absl::StatusOr<PlaceResult> Place(Coordinator::Stub& stub, Fleet& fleet, const Layout& layout) {
  PlaceResult r;
  fleet.latency().Reset();
  fleet.assign_latency().Reset();
  fleet.counters().assignment_bytes_max = 0;
  Clock::time_point placing_at;
  SubmitJobRequest submit;
  submit.set_spec_json(SpecJson(layout));
  SubmitJobResponse submitted;
  const auto t0 = Clock::now();
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::GetFlag(FLAGS_rpc_timeout)));
    RETURN_IF_ERROR(FromGrpc(stub.SubmitJob(&ctx, submit, &submitted), "SubmitJob"));
  }
  r.submit_ms = MillisSince(t0);
  const Job& job = submitted.job();

  grpc::ClientContext watch_ctx;
  // RUNNING comes about two heartbeat intervals after PLACING.
  watch_ctx.set_deadline(Deadline(absl::Seconds(60) + 4 * fleet.interval()));
  WatchJobRequest watch;
  watch.set_job_id(job.id());
  auto reader = stub.WatchJob(&watch_ctx, watch);
  JobUpdate u;
  while (reader->Read(&u)) {
    if (!u.has_state_change()) continue;
    const StateChange& c = u.state_change();
    if (c.state() == QUEUED && layout.ranks() > fleet.size()) {
      r.reason = c.reason();
      break;  // cannot be placed with this many workers
    }
    if (c.state() == PLACING && r.placing_ms < 0) {
      placing_at = Clock::now();
      r.placing_ms = MillisSince(t0);
      r.placing_coord_ms = static_cast<double>(c.time_unix_ms() - job.submitted_unix_ms());
      r.placed = true;
    }
    if (c.state() == RUNNING) {
      r.running_ms = MillisSince(t0);
      // Every rank acknowledged its assignment, so every one has arrived.
      const Clock::time_point last{Clock::duration(fleet.counters().last_assignment_ns.load())};
      r.delivered_ms = std::chrono::duration<double, std::milli>(last - placing_at).count();
      r.assignment_bytes = fleet.counters().assignment_bytes_max;
      break;
    }
    if (c.state() == FAILED || c.state() == CANCELLED || c.state() == SUCCEEDED) {
      r.reason = absl::StrCat(JobState_Name(c.state()), ": ", c.reason());
      break;
    }
  }
  watch_ctx.TryCancel();
  reader->Finish();
  r.heartbeats = fleet.latency().Summarize();
  r.assigning = fleet.assign_latency().Summarize();

  CancelJobRequest cancel;
  cancel.set_job_id(job.id());
  cancel.set_reason("heartbeat_load: measured");
  Job cancelled;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::GetFlag(FLAGS_rpc_timeout)));
  RETURN_IF_ERROR(FromGrpc(stub.CancelJob(&ctx, cancel, &cancelled), "CancelJob"));
  // The workers hear of the cancel in their next heartbeats.
  for (int i = 0;
       i < 100 + 20 * absl::ToInt64Seconds(fleet.interval()) && fleet.Running(job.id()) > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  return r;
}

std::string Fmt(double ms) { return ms < 0 ? "-" : absl::StrFormat("%.2f", ms); }

absl::Status Main() {
  const int n = absl::GetFlag(FLAGS_workers);
  const absl::Duration interval = absl::GetFlag(FLAGS_interval);
  if (n < 1) return absl::InvalidArgumentError("--workers must be >= 1");
  std::vector<Layout> layouts;
  for (const std::string& text : absl::GetFlag(FLAGS_layouts)) {
    ASSIGN_OR_RETURN(Layout l, ParseLayout(text));
    layouts.push_back(l);
  }

  std::unique_ptr<CoordinatorProcess> child;
  std::string address = absl::GetFlag(FLAGS_coordinator);
  if (address.empty()) {
    if (absl::GetFlag(FLAGS_coordinator_binary).empty()) {
      return absl::InvalidArgumentError("give --coordinator or --coordinator_binary");
    }
    int largest = 1024;  // the coordinator's default --max_job_workers
    for (const Layout& l : layouts) largest = std::max(largest, l.ranks());
    ASSIGN_OR_RETURN(child, CoordinatorProcess::Start(absl::GetFlag(FLAGS_coordinator_binary),
                                                      absl::GetFlag(FLAGS_lease), largest));
    address = child->address();
    std::printf("started a coordinator on %s (log %s)\n", address.c_str(), child->log().c_str());
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> admin_creds,
                   ChannelCredentials(TlsFilesFor("admin")));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> worker_creds,
                   ChannelCredentials(TlsFilesFor("worker")));
  auto control = Coordinator::NewStub(grpc::CreateChannel(address, admin_creds));
  {  // Wait for it to answer.
    absl::Status s;
    for (int i = 0; i < 100; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(Deadline(absl::Seconds(1)));
      // Through connection failures too: a TLS channel refused before the coordinator listened
      // did not connect again within 15 s of failing fast (plaintext did).
      ctx.set_wait_for_ready(true);
      ListWorkersResponse resp;
      s = FromGrpc(control->ListWorkers(&ctx, ListWorkersRequest(), &resp), "ListWorkers");
      if (s.ok()) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    RETURN_IF_ERROR(Annotate(s, absl::StrCat("coordinator at ", address)));
  }

  const bool tls = !absl::GetFlag(FLAGS_tls_dir).empty();
  std::printf("%d simulated workers (%s), %d per host, heartbeat every %s, against %s (%s)\n", n,
              absl::GetFlag(FLAGS_shared_channel) ? "one shared connection"
              : absl::GetFlag(FLAGS_connections) > 0
                  ? absl::StrCat(absl::GetFlag(FLAGS_connections), " shared connections").c_str()
                  : "one connection each",
              absl::GetFlag(FLAGS_workers_per_host), absl::FormatDuration(interval).c_str(),
              address.c_str(), tls ? "mutual TLS" : "plaintext");
  Fleet fleet(address, n, absl::GetFlag(FLAGS_workers_per_host), interval, worker_creds);
  const auto reg_start = Clock::now();
  RETURN_IF_ERROR(fleet.RegisterAll());
  const double register_ms = MillisSince(reg_start);
  std::printf("registered %d workers in %.0f ms (%d at a time)\n", n, register_ms,
              std::max(1, absl::GetFlag(FLAGS_register_threads)));
  fleet.StartHeartbeats();
  absl::SleepFor(absl::GetFlag(FLAGS_warmup));
  fleet.latency().Reset();
  const double coordinator_cpu0 = child != nullptr ? child->CpuSeconds() : 0;
  const double own_cpu0 = ProcessCpuSeconds(getpid());
  const int64_t sent0 = fleet.counters().sent, errors0 = fleet.counters().errors,
                skipped0 = fleet.counters().skipped;
  absl::SleepFor(absl::GetFlag(FLAGS_duration));
  const Summary hb = fleet.latency().Summarize();
  const double window_s = absl::ToDoubleSeconds(absl::GetFlag(FLAGS_duration));
  const double coordinator_cpu =
      child != nullptr ? (child->CpuSeconds() - coordinator_cpu0) / window_s * 100 : -1;
  const double own_cpu = (ProcessCpuSeconds(getpid()) - own_cpu0) / window_s * 100;
  const int64_t sent = fleet.counters().sent - sent0, errors = fleet.counters().errors - errors0,
                skipped = fleet.counters().skipped - skipped0;
  std::printf(
      "heartbeats over %s: %lld sent (%.0f/s), %lld errors, %lld skipped; latency ms: "
      "p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  mean %.2f\n",
      absl::FormatDuration(absl::GetFlag(FLAGS_duration)).c_str(), static_cast<long long>(sent),
      sent / absl::ToDoubleSeconds(absl::GetFlag(FLAGS_duration)), static_cast<long long>(errors),
      static_cast<long long>(skipped), hb.p50, hb.p90, hb.p99, hb.max, hb.mean);
  std::printf("heartbeat interval told by the coordinator: %s (the workers follow it)\n",
              fleet.told_interval() > absl::ZeroDuration()
                  ? absl::FormatDuration(fleet.told_interval()).c_str()
                  : "none (an older coordinator)");
  std::printf("CPU meanwhile: coordinator %s%% of a core, this tool %.0f%% (of %ld cores)\n",
              coordinator_cpu < 0 ? "?" : absl::StrFormat("%.0f", coordinator_cpu).c_str(), own_cpu,
              sysconf(_SC_NPROCESSORS_ONLN));

  double list_ms = 0;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::GetFlag(FLAGS_rpc_timeout)));
    ListWorkersResponse resp;
    const auto t = Clock::now();
    const absl::Status listed =
        FromGrpc(control->ListWorkers(&ctx, ListWorkersRequest(), &resp), "ListWorkers");
    list_ms = MillisSince(t);
    if (listed.ok()) {
      std::printf("ListWorkers: %d workers in %.2f ms\n", resp.workers_size(), list_ms);
    } else {
      // Tens of thousands of workers exceed a client's default 4 MiB message: not this tool's
      // measurement, so it goes on.
      std::printf("ListWorkers: %s (%.2f ms)\n", std::string(listed.message()).c_str(), list_ms);
      list_ms = -1;
    }
  }

  std::vector<std::string> results;
  for (const Layout& layout : layouts) {
    ASSIGN_OR_RETURN(PlaceResult p, Place(*control, fleet, layout));
    if (p.placed) {
      std::printf(
          "job %s (%d ranks): submit %.2f ms; PLACING after %.2f ms (coordinator "
          "clock: %.0f ms); RUNNING after %s ms\n"
          "  meanwhile: %lld heartbeats carrying the assignment, latency ms p50 %.2f "
          "p99 %.2f max %.2f; %lld others, p50 %.2f p99 %.2f max %.2f\n"
          "  every rank's assignment delivered %s ms after PLACING (%s heartbeat intervals of "
          "%s); the largest one rank was sent: %lld bytes\n",
          layout.name().c_str(), layout.ranks(), p.submit_ms, p.placing_ms, p.placing_coord_ms,
          Fmt(p.running_ms).c_str(), static_cast<long long>(p.assigning.count), p.assigning.p50,
          p.assigning.p99, p.assigning.max, static_cast<long long>(p.heartbeats.count),
          p.heartbeats.p50, p.heartbeats.p99, p.heartbeats.max, Fmt(p.delivered_ms).c_str(),
          p.delivered_ms < 0 ? "-"
                             : absl::StrFormat("%.2f", p.delivered_ms / absl::ToDoubleMilliseconds(
                                                                            fleet.interval()))
                                   .c_str(),
          absl::FormatDuration(fleet.interval()).c_str(),
          static_cast<long long>(p.assignment_bytes));
    } else {
      std::printf("job %s (%d ranks): not placed: %s (submit %.2f ms)\n", layout.name().c_str(),
                  layout.ranks(), p.reason.c_str(), p.submit_ms);
    }
    results.push_back(absl::StrFormat(
        "RESULT tls=%d workers=%d hb_count=%d hb_errors=%d hb_skipped=%d hb_p50_ms=%.2f "
        "hb_p90_ms=%.2f hb_p99_ms=%.2f hb_max_ms=%.2f register_ms=%.0f list_workers_ms=%.2f "
        "layout=%s ranks=%d placed=%d submit_ms=%.2f placing_ms=%s placing_coord_ms=%s "
        "running_ms=%s place_hb_p99_ms=%.2f place_assign_p99_ms=%.2f coordinator_cpu_pct=%.0f "
        "tool_cpu_pct=%.0f interval_ms=%.0f delivered_ms=%s assignment_bytes=%lld",
        tls ? 1 : 0, n, hb.count, errors, skipped, hb.p50, hb.p90, hb.p99, hb.max, register_ms,
        list_ms, layout.name(), layout.ranks(), p.placed ? 1 : 0, p.submit_ms, Fmt(p.placing_ms),
        Fmt(p.placing_coord_ms), Fmt(p.running_ms), p.heartbeats.p99, p.assigning.p99,
        coordinator_cpu, own_cpu, absl::ToDoubleMilliseconds(fleet.interval()), Fmt(p.delivered_ms),
        static_cast<long long>(p.assignment_bytes)));
  }
  fleet.StopHeartbeats();
  for (const std::string& line : results) std::printf("%s\n", line.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace dtrain::load

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Load test of the coordinator: N simulated workers heartbeating over gRPC, then job "
      "placement.\n  heartbeat_load --coordinator_binary=bazel-bin/coordinator/"
      "dtrain-coordinator --workers=1000");
  absl::ParseCommandLine(argc, argv);
  // As in the daemons: Debian builds Abseil without NDEBUG, so every Mutex::Lock would take the
  // process-wide deadlock graph's lock; with a mutex per simulated worker that was a fifth of
  // this tool's CPU, taken from the coordinator it measures on the same cores.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  signal(SIGPIPE, SIG_IGN);
  absl::Status status = dtrain::load::Main();
  std::fflush(stdout);
  if (!status.ok()) {
    std::fprintf(stderr, "heartbeat_load: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
