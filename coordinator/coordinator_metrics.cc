#include "coordinator/coordinator_metrics.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/recovery.h"

namespace dtrain::coordinator {
namespace {

// RPCs: 100us (GetJob on a warm store) to minutes (WatchJob streams; longer ones land in +Inf).
metrics::Buckets RpcBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,     1,      2.5,   5,      10,    30,   60,    300,  3600};
}
// Queue wait: immediate placement (a scheduler tick) to a day.
metrics::Buckets QueueWaitBuckets() {
  return {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 14400, 86400};
}
// Placement is pure computation: microseconds for a few workers, more for thousands.
metrics::Buckets PlacementBuckets() {
  return {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
          0.005,   0.01,     0.025,   0.05,   0.1,     0.25,   0.5,   1};
}

constexpr JobState kJobStates[] = {QUEUED, PLACING,   RUNNING,   SUCCEEDED,
                                   FAILED, CANCELLED, RECOVERING};

// A recovery: a few seconds (a spare is idle) to wait_for and beyond (workers to come back).
metrics::Buckets RecoveryBuckets() {
  return {0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 120, 300, 600, 1800};
}

// Times one call from its start (the factory creates it when the call arrives) to the status
// being sent; a call torn down without a status (server shutdown) counts as CANCELLED.
class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(CoordinatorMetrics* metrics, absl::string_view method)
      : metrics_(metrics), method_(method), start_(std::chrono::steady_clock::now()) {}
  ~RpcInterceptor() override {
    if (!recorded_) Record(grpc::StatusCode::CANCELLED);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS) &&
        !recorded_) {
      Record(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  void Record(grpc::StatusCode code) {
    recorded_ = true;
    metrics_->RpcFinished(method_, code,
                          absl::FromChrono(std::chrono::steady_clock::now() - start_));
  }

  CoordinatorMetrics* const metrics_;
  const std::string method_;
  const std::chrono::steady_clock::time_point start_;
  bool recorded_ = false;
};

class RpcInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(CoordinatorMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // "/dtrain.Coordinator/SubmitJob" -> "SubmitJob"
    absl::string_view method = info->method() != nullptr ? info->method() : "";
    const size_t slash = method.rfind('/');
    if (slash != absl::string_view::npos) method.remove_prefix(slash + 1);
    return new RpcInterceptor(metrics_, method);
  }

 private:
  CoordinatorMetrics* const metrics_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> CoordinatorMetrics::Create(
    metrics::Registry* registry) {
  std::unique_ptr<CoordinatorMetrics> m(new CoordinatorMetrics(registry));
  RETURN_IF_ERROR(m->AddLifecycleFamilies());
  RETURN_IF_ERROR(m->AddRpcAndJobFamilies());
  m->hook_ = registry->AddCollectHook([p = m.get()] { p->Collect(); });
  return m;
}

// Workers and jobs by state, submissions, queue wait, placement, recoveries.
// Deleted jobs (dtrain delete, --ended_job_retention) and their directories.
absl::Status CoordinatorMetrics::AddDeletionFamilies() {
  ASSIGN_OR_RETURN(
      metrics::Family<metrics::Counter> * deleted,
      registry_->AddCounter("dtrain_coordinator_jobs_deleted_total",
                            "Ended jobs deleted (dtrain delete, --ended_job_retention) since the "
                            "coordinator started."));
  deleted_ = &deleted->Add({});
  ASSIGN_OR_RETURN(dirs_removed_,
                   registry_->AddCounter("dtrain_coordinator_job_dirs_removed_total",
                                         "Deleted jobs' directories that a worker reported on, "
                                         "by result: removed, absent (nothing there), failed "
                                         "(left in place; the coordinator's log says why), "
                                         "abandoned (the last worker of its host forgotten).",
                                         {"result"}));
  for (const char* result : {"removed", "absent", "failed", "abandoned"}) {
    dirs_removed_->Add({{"result", result}});
  }
  ASSIGN_OR_RETURN(
      metrics::Family<metrics::Counter> * freed,
      registry_->AddCounter("dtrain_coordinator_job_dir_bytes_removed_total",
                            "Bytes of the deleted jobs' directories that workers removed."));
  bytes_removed_ = &freed->Add({});
  ASSIGN_OR_RETURN(
      metrics::Family<metrics::Gauge> * pending,
      registry_->AddGauge("dtrain_coordinator_job_dir_removals_pending",
                          "Deleted jobs' directories that no worker has answered for yet (no "
                          "live worker on their host); computed at scrape time."));
  removals_pending_ = &pending->Add({});
  ASSIGN_OR_RETURN(samples_,
                   registry_->AddCounter("dtrain_coordinator_samples_total",
                                         "SampleJob calls (dtrain sample JOB, the console) by "
                                         "result: drawn, refused (bad parameters, nothing to "
                                         "sample, no worker there, a worker's refusal), timeout, "
                                         "lost (the worker went or restarted), failed.",
                                         {"result"}));
  for (const char* result : {"drawn", "refused", "timeout", "lost", "failed"}) {
    samples_->Add({{"result", result}});
  }
  return absl::OkStatus();
}

absl::Status CoordinatorMetrics::AddLifecycleFamilies() {
  ASSIGN_OR_RETURN(workers_,
                   registry_->AddGauge("dtrain_coordinator_workers",
                                       "Workers known to the coordinator, by state (idle, busy, "
                                       "lost); computed at scrape time.",
                                       {"state"}));
  ASSIGN_OR_RETURN(db_errors_,
                   registry_->AddCounter("dtrain_coordinator_db_errors_total",
                                         "Errors from the coordinator's database (SQLite) by "
                                         "kind: full (its disk), corrupt, busy, other. While "
                                         "they last, job changes and reports are refused and "
                                         "retried by the workers.",
                                         {"kind"}));
  for (const char* kind : {"full", "corrupt", "busy", "other"}) db_errors_->Add({{"kind", kind}});
  ASSIGN_OR_RETURN(jobs_,
                   registry_->AddGauge("dtrain_coordinator_jobs",
                                       "Jobs in the coordinator's database, by state; computed "
                                       "at scrape time.",
                                       {"state"}));
  ASSIGN_OR_RETURN(
      metrics::Family<metrics::Counter> * submitted,
      registry_->AddCounter("dtrain_coordinator_jobs_submitted_total",
                            "Jobs accepted by SubmitJob since the coordinator started."));
  RETURN_IF_ERROR(AddDeletionFamilies());
  ASSIGN_OR_RETURN(
      metrics::Family<metrics::Histogram> * queue_wait,
      registry_->AddHistogram("dtrain_coordinator_job_queue_wait_seconds",
                              "Time from a job's submission to its placement (QUEUED to PLACING).",
                              {}, QueueWaitBuckets()));
  ASSIGN_OR_RETURN(
      metrics::Family<metrics::Histogram> * placement,
      registry_->AddHistogram("dtrain_coordinator_placement_seconds",
                              "Time spent computing one job's placement.", {}, PlacementBuckets()));
  ASSIGN_OR_RETURN(
      metrics::Family<metrics::Counter> * recoveries,
      registry_->AddCounter("dtrain_coordinator_job_recoveries_total",
                            "Jobs that entered RECOVERING since the coordinator started, by kind: "
                            "failure (fault_tolerance), or a planned restart (grow, "
                            "straggler_replaced, rebalance, maintenance, finishing).",
                            {"kind"}));
  ASSIGN_OR_RETURN(
      metrics::Family<metrics::Gauge> * awaiting_checkpoint,
      registry_->AddGauge("dtrain_coordinator_jobs_awaiting_checkpoint",
                          "Running jobs whose workers are asked for a checkpoint now: a "
                          "preemption, a drain, a rebalance or `dtrain checkpoint` waits for its "
                          "seal (HeartbeatResponse.checkpoint_requests)."));
  ASSIGN_OR_RETURN(
      metrics::Family<metrics::Histogram> * recovery,
      registry_->AddHistogram("dtrain_coordinator_job_recovery_seconds",
                              "Time from a failed worker's last sign of life to the first step "
                              "of the recovered run (detect + stop + place + load + first step).",
                              {}, RecoveryBuckets()));
  submitted_ = &submitted->Add({});
  queue_wait_ = &queue_wait->Add({}, QueueWaitBuckets());
  placement_ = &placement->Add({}, PlacementBuckets());
  recoveries_ = recoveries;
  for (absl::string_view kind : kRecoveryKinds) recoveries->Add({{"kind", std::string(kind)}});
  recovery_ = &recovery->Add({}, RecoveryBuckets());
  awaiting_checkpoint_ = &awaiting_checkpoint->Add({});
  // Every state from the first scrape on, at 0 until a source says otherwise.
  for (const char* state : {"idle", "busy", "lost"}) workers_->Add({{"state", state}});
  for (JobState state : kJobStates) {
    jobs_->Add({{"state", absl::AsciiStrToLower(JobState_Name(state))}});
  }
  return absl::OkStatus();
}

// Per RPC, per running job (straggler scores, info, directory, checkpoint age), the queue's
// oldest job.
absl::Status CoordinatorMetrics::AddRpcAndJobFamilies() {
  ASSIGN_OR_RETURN(rpcs_, registry_->AddCounter("dtrain_coordinator_rpcs_total",
                                                "Coordinator RPCs finished, by method and gRPC "
                                                "status code.",
                                                {"method", "code"}));
  ASSIGN_OR_RETURN(rpc_duration_,
                   registry_->AddHistogram("dtrain_coordinator_rpc_duration_seconds",
                                           "Time from an RPC's arrival to its status being sent "
                                           "(WatchJob: the whole stream), by method.",
                                           {"method"}, RpcBuckets()));
  ASSIGN_OR_RETURN(straggler_score_,
                   registry_->AddGauge("dtrain_coordinator_job_straggler_score",
                                       "A running job's rank: its compute per step per unit of "
                                       "planned cost over the last window, over its peers' median "
                                       "(1.0: at their pace; JobSpec.stragglers).",
                                       {"job_id", "rank", "worker"}));
  ASSIGN_OR_RETURN(stragglers_,
                   registry_->AddGauge("dtrain_coordinator_job_stragglers",
                                       "A running job's ranks flagged as stragglers now (score at "
                                       "or over stragglers.threshold until it recovers).",
                                       {"job_id"}));
  ASSIGN_OR_RETURN(metrics::Family<metrics::Gauge> * oldest_queued,
                   registry_->AddGauge("dtrain_coordinator_oldest_queued_job_age_seconds",
                                       "How long the oldest QUEUED job has waited since its "
                                       "submission (0: none queued); computed at scrape time."));
  ASSIGN_OR_RETURN(job_info_,
                   registry_->AddGauge("dtrain_coordinator_job_info",
                                       "1 for every job not ended yet (QUEUED, PLACING, RUNNING, "
                                       "RECOVERING): its spec's name (at most 64 characters) and "
                                       "state, to join on job_id; ended jobs have no series.",
                                       {"job_id", "name", "state"}));
  ASSIGN_OR_RETURN(dir_bytes_,
                   registry_->AddGauge("dtrain_coordinator_job_directory_bytes",
                                       "A job not ended yet: bytes in its directory (checkpoints, "
                                       "weights) after its last sealed checkpoint and retention, "
                                       "as its rank 0 counted them (absent before the first).",
                                       {"job_id"}));
  ASSIGN_OR_RETURN(checkpoint_age_,
                   registry_->AddGauge("dtrain_coordinator_job_checkpoint_age_seconds",
                                       "A job not ended yet: time since its last sealed "
                                       "checkpoint (absent before its first).",
                                       {"job_id"}));
  ASSIGN_OR_RETURN(owner_workers_,
                   registry_->AddGauge("dtrain_coordinator_owner_workers",
                                       "Workers held by each owner's placed jobs (owner: the CN "
                                       "of the certificate that submitted them; empty: no owner): "
                                       "the share the queue orders fairly by.",
                                       {"owner"}));
  ASSIGN_OR_RETURN(
      owner_queued_,
      registry_->AddGauge("dtrain_coordinator_owner_queued_jobs",
                          "Each owner's jobs waiting in the queue (QUEUED).", {"owner"}));
  oldest_queued_ = &oldest_queued->Add({});
  return absl::OkStatus();
}

CoordinatorMetrics::~CoordinatorMetrics() { registry_->RemoveCollectHook(hook_); }

void CoordinatorMetrics::SetStateSource(std::function<absl::StatusOr<StateCounts>()> source) {
  absl::MutexLock lock(&source_mu_);
  source_ = std::move(source);
}

void CoordinatorMetrics::SetDatabaseErrorSource(
    std::function<std::map<std::string, int64_t>()> source) {
  absl::MutexLock lock(&source_mu_);
  db_errors_source_ = std::move(source);
}

void CoordinatorMetrics::Collect() {
  absl::MutexLock lock(&source_mu_);
  if (db_errors_source_) {
    // Independent of the state source, which reads the database that may be failing.
    for (const auto& [kind, count] : db_errors_source_()) {
      int64_t& counted = db_errors_counted_[kind];
      metrics::Counter& counter = db_errors_->Add({{"kind", kind}});
      if (count > counted) counter.Increment(static_cast<double>(count - counted));
      counted = std::max(counted, count);
    }
  }
  if (!source_) return;
  absl::StatusOr<StateCounts> counts = source_();
  if (!counts.ok()) return;
  workers_->Add({{"state", "idle"}}).Set(counts->idle);
  workers_->Add({{"state", "busy"}}).Set(counts->busy);
  workers_->Add({{"state", "lost"}}).Set(counts->lost);
  for (JobState state : kJobStates) {
    auto it = counts->jobs.find(state);
    jobs_->Add({{"state", absl::AsciiStrToLower(JobState_Name(state))}})
        .Set(it == counts->jobs.end() ? 0 : it->second);
  }
  // The jobs' series are made again each scrape: a job that ended or changed state loses its
  // old ones (a label set that stayed the same gets the same child back).
  metrics::Family<metrics::Gauge>* const per_job[] = {job_info_, checkpoint_age_, dir_bytes_};
  for (size_t i = 0; i < active_series_.size(); ++i) {
    if (active_series_[i] != nullptr) per_job[i % 3]->Remove(active_series_[i]);
  }
  active_series_.clear();
  double oldest = 0;
  for (const StateCounts::ActiveJob& job : counts->active) {
    if (job.state == QUEUED) {
      oldest = std::max(oldest, absl::ToDoubleSeconds(counts->now - job.submitted));
    }
    active_series_.push_back(
        &job_info_->Add({{"job_id", job.id},
                         {"name", job.name.substr(0, 64)},
                         {"state", absl::AsciiStrToLower(JobState_Name(job.state))}}));
    active_series_.back()->Set(1);
    active_series_.push_back(nullptr);
    if (job.sealed != absl::InfinitePast()) {
      active_series_.back() = &checkpoint_age_->Add({{"job_id", job.id}});
      active_series_.back()->Set(absl::ToDoubleSeconds(counts->now - job.sealed));
    }
    active_series_.push_back(nullptr);
    if (job.dir_bytes > 0) {
      active_series_.back() = &dir_bytes_->Add({{"job_id", job.id}});
      active_series_.back()->Set(static_cast<double>(job.dir_bytes));
    }
  }
  oldest_queued_->Set(oldest);
  SetOwnerSeries(counts->active);
  removals_pending_->Set(static_cast<double>(counts->dir_removals_pending));
}

void CoordinatorMetrics::SetOwnerSeries(const std::vector<StateCounts::ActiveJob>& active) {
  for (const auto& [family, gauge] : owner_series_) family->Remove(gauge);
  owner_series_.clear();
  std::map<std::string, std::pair<int64_t, int64_t>> by_owner;  // workers held, jobs queued
  for (const StateCounts::ActiveJob& job : active) {
    auto& [workers, queued] = by_owner[job.owner];
    workers += job.workers;
    queued += job.state == QUEUED ? 1 : 0;
  }
  for (const auto& [owner, held] : by_owner) {
    metrics::Gauge* workers = &owner_workers_->Add({{"owner", owner}});
    workers->Set(static_cast<double>(held.first));
    metrics::Gauge* queued = &owner_queued_->Add({{"owner", owner}});
    queued->Set(static_cast<double>(held.second));
    owner_series_.push_back({owner_workers_, workers});
    owner_series_.push_back({owner_queued_, queued});
  }
}

void CoordinatorMetrics::JobSubmitted() { submitted_->Increment(); }

void CoordinatorMetrics::JobDeleted() { deleted_->Increment(); }

void CoordinatorMetrics::DirRemoved(DirRemovalState state, int64_t bytes) {
  const char* result = state == DIR_REMOVED             ? "removed"
                       : state == DIR_ABSENT            ? "absent"
                       : state == DIR_REMOVAL_ABANDONED ? "abandoned"
                                                        : "failed";
  dirs_removed_->Add({{"result", result}}).Increment();
  if (state == DIR_REMOVED) bytes_removed_->Increment(static_cast<double>(bytes));
}

void CoordinatorMetrics::SampleEnded(const absl::Status& status) {
  const char* result = "failed";
  switch (status.code()) {
    case absl::StatusCode::kOk:
      result = "drawn";
      break;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kResourceExhausted:
      result = "refused";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      result = "timeout";
      break;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      result = "lost";
      break;
    default:
      break;
  }
  samples_->Add({{"result", result}}).Increment();
}

void CoordinatorMetrics::JobPlaced(absl::Duration queue_wait) {
  queue_wait_->Observe(absl::ToDoubleSeconds(queue_wait));
}

void CoordinatorMetrics::JobRecoveryStarted(absl::string_view kind) {
  recoveries_->Add({{"kind", std::string(kind)}}).Increment();
}

void CoordinatorMetrics::SetJobsAwaitingCheckpoint(int64_t jobs) {
  awaiting_checkpoint_->Set(static_cast<double>(jobs));
}

void CoordinatorMetrics::JobRecovered(absl::Duration took) {
  recovery_->Observe(absl::ToDoubleSeconds(took));
}

void CoordinatorMetrics::PlacementComputed(absl::Duration elapsed) {
  placement_->Observe(absl::ToDoubleSeconds(elapsed));
}

void CoordinatorMetrics::SetStragglerScores(const std::string& job_id,
                                            const std::vector<StragglerScore>& scores) {
  absl::MutexLock lock(&stragglers_mu_);
  std::vector<metrics::Gauge*>& series = straggler_series_[job_id];
  RemoveStragglerSeries(series);  // a new run may have moved a rank to another worker
  int flagged = 0;
  for (const StragglerScore& s : scores) {
    metrics::Gauge& g = straggler_score_->Add(
        {{"job_id", job_id}, {"rank", absl::StrCat(s.rank())}, {"worker", s.worker_id()}});
    g.Set(s.score());
    series.push_back(&g);
    flagged += s.flagged() ? 1 : 0;
  }
  metrics::Gauge& count = stragglers_->Add({{"job_id", job_id}});
  count.Set(flagged);
  series.push_back(&count);
}

void CoordinatorMetrics::ClearStragglerScores(const std::string& job_id) {
  absl::MutexLock lock(&stragglers_mu_);
  auto it = straggler_series_.find(job_id);
  if (it == straggler_series_.end()) return;
  RemoveStragglerSeries(it->second);
  straggler_series_.erase(it);
}

void CoordinatorMetrics::RemoveStragglerSeries(std::vector<metrics::Gauge*>& series) {
  if (series.empty()) return;
  for (size_t i = 0; i + 1 < series.size(); ++i) straggler_score_->Remove(series[i]);
  stragglers_->Remove(series.back());
  series.clear();
}

void CoordinatorMetrics::RpcFinished(absl::string_view method, grpc::StatusCode code,
                                     absl::Duration elapsed) {
  metrics::Histogram* duration;
  metrics::Counter* calls;
  {
    absl::MutexLock lock(&methods_mu_);
    MethodMetrics& m = methods_[method];
    if (m.duration == nullptr) {
      m.duration = &rpc_duration_->Add({{"method", std::string(method)}}, RpcBuckets());
    }
    metrics::Counter*& c = m.calls[code];
    if (c == nullptr) {
      c = &rpcs_->Add({{"method", std::string(method)},
                       {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}});
    }
    duration = m.duration;
    calls = c;
  }
  calls->Increment();
  duration->Observe(absl::ToDoubleSeconds(elapsed));
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
CoordinatorMetrics::NewRpcInterceptorFactory() {
  return std::make_unique<RpcInterceptorFactory>(this);
}

}  // namespace dtrain::coordinator
