// CoordinatorMetrics: every Prometheus metric of dtrain-coordinator, in one place (the table is
// in coordinator/README.md). JobManager reports job events to it, a gRPC server interceptor
// reports every RPC, and the worker and job gauges are computed at scrape time from a source
// JobManager installs (the registry's counts and one indexed store query), so nothing has to
// keep them in step.
//
//   metrics::Registry registry;
//   ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorMetrics> m, CoordinatorMetrics::Create(&registry));
//   options.metrics = m.get();                              // JobManager::Options
//   StartServer(listen, &service, m->NewRpcInterceptorFactory());
//   MetricsServer::Start("0.0.0.0:9464", &registry);
// Destroy in reverse: the gRPC server and the JobManager before `m`, `m` before `registry`.
#ifndef DTRAIN_COORDINATOR_COORDINATOR_METRICS_H_
#define DTRAIN_COORDINATOR_COORDINATOR_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/registry.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/status.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace dtrain::coordinator {

class CoordinatorMetrics {
 public:
  // Adds the coordinator's families to `registry`, which must outlive this object.
  static absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> Create(metrics::Registry* registry);
  ~CoordinatorMetrics();  // removes its collect hook
  CoordinatorMetrics(const CoordinatorMetrics&) = delete;
  CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

  // What dtrain_coordinator_workers and dtrain_coordinator_jobs show.
  struct StateCounts {
    int64_t idle = 0, busy = 0, lost = 0;  // workers
    std::map<JobState, int64_t> jobs;      // absent states are 0
    // The jobs not ended yet (QUEUED, PLACING, RUNNING, RECOVERING), for
    // dtrain_coordinator_job_info, dtrain_coordinator_oldest_queued_job_age_seconds and
    // dtrain_coordinator_job_checkpoint_age_seconds, at the manager's clock `now`.
    struct ActiveJob {
      std::string id, name;
      JobState state = QUEUED;
      absl::Time submitted;
      absl::Time sealed = absl::InfinitePast();  // its last sealed checkpoint; none: past
      int64_t dir_bytes = 0;  // its directory's bytes after that seal; 0: not reported
      std::string owner;      // Job.owner, for dtrain_coordinator_owner_*
      int64_t workers = 0;    // workers it holds: its placement's ranks once placed
    };
    std::vector<ActiveJob> active;
    int64_t dir_removals_pending = 0;  // deleted jobs' directories no worker has answered for
    absl::Time now;
  };
  // Called once per scrape; on an error (or with no source) the gauges keep their last values.
  // Waits for a scrape in progress, so once SetStateSource(nullptr) returns the old source is
  // never called again. JobManager sets it in Create and clears it when destroyed.
  void SetStateSource(std::function<absl::StatusOr<StateCounts>()> source);
  // What dtrain_coordinator_db_errors_total{kind} counts: the database errors so far, by kind
  // ("full", "corrupt", "busy", "other"; job_store.h DatabaseErrorCounts), read at each
  // scrape like the state source (and set and cleared with it).
  void SetDatabaseErrorSource(std::function<std::map<std::string, int64_t>()> source);

  // Job events (lock-free).
  void JobSubmitted();
  void JobDeleted();
  // A worker reported on a deleted job's directory (`bytes` freed when DIR_REMOVED).
  void DirRemoved(DirRemovalState state, int64_t bytes);
  // A SampleJob call ended with `status` (SampleResultOf names its result label).
  void SampleEnded(const absl::Status& status);
  void JobPlaced(absl::Duration queue_wait);  // submitted -> PLACING
  void PlacementComputed(absl::Duration elapsed);
  // A job entered RECOVERING; `kind` one of coordinator/recovery.h kRecoveryKinds.
  void JobRecoveryStarted(absl::string_view kind);
  void JobRecovered(absl::Duration took);  // its failure -> the recovered run's first step
  // How many running jobs are asked for a checkpoint now (JobManager, each scheduler pass).
  void SetJobsAwaitingCheckpoint(int64_t jobs);
  // A running job's latest straggler scores (coordinator/policy/stragglers.h): one
  // dtrain_coordinator_job_straggler_score{job_id,rank,worker} per rank and
  // dtrain_coordinator_job_stragglers{job_id}, the ranks flagged now; replaces the job's series
  // (a new run may have other workers). ClearStragglerScores removes them (the job ended).
  void SetStragglerScores(const std::string& job_id, const std::vector<StragglerScore>& scores);
  void ClearStragglerScores(const std::string& job_id);
  // One finished RPC: `method` as in the proto ("SubmitJob").
  void RpcFinished(absl::string_view method, grpc::StatusCode code, absl::Duration elapsed);

  // For grpc::ServerBuilder: calls RpcFinished for every call of the server, when its status is
  // sent (unary calls when they reply; WatchJob when its stream ends, for any reason). The
  // server must be destroyed before this object.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewRpcInterceptorFactory();

 private:
  explicit CoordinatorMetrics(metrics::Registry* registry) : registry_(registry) {}
  // Create's two halves: the families and their first children, in the order they are scraped.
  absl::Status AddLifecycleFamilies();
  absl::Status AddRpcAndJobFamilies();
  absl::Status AddDeletionFamilies();  // (called by AddLifecycleFamilies)
  void Collect();                      // the collect hook
  // The dtrain_coordinator_owner_* series, made again from `active` (Collect's).
  void SetOwnerSeries(const std::vector<StateCounts::ActiveJob>& active)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(source_mu_);
  // Removes one job's straggler series (its scores, then its flagged count) and empties it.
  void RemoveStragglerSeries(std::vector<metrics::Gauge*>& series)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stragglers_mu_);

  // Children of one method, created at its first call (codes at their first use).
  struct MethodMetrics {
    metrics::Histogram* duration = nullptr;
    std::map<grpc::StatusCode, metrics::Counter*> calls;
  };

  metrics::Registry* const registry_;
  metrics::Registry::HookId hook_ = 0;
  metrics::Family<metrics::Gauge>* workers_ = nullptr;
  metrics::Family<metrics::Gauge>* jobs_ = nullptr;
  metrics::Counter* submitted_ = nullptr;
  metrics::Counter* deleted_ = nullptr;
  metrics::Family<metrics::Counter>* dirs_removed_ = nullptr;  // by result
  metrics::Counter* bytes_removed_ = nullptr;
  metrics::Gauge* removals_pending_ = nullptr;
  metrics::Family<metrics::Counter>* samples_ = nullptr;  // by result
  metrics::Histogram* queue_wait_ = nullptr;
  metrics::Histogram* placement_ = nullptr;
  metrics::Family<metrics::Counter>* recoveries_ = nullptr;  // by kind
  metrics::Histogram* recovery_ = nullptr;
  metrics::Gauge* awaiting_checkpoint_ = nullptr;
  metrics::Family<metrics::Gauge>* straggler_score_ = nullptr;
  metrics::Family<metrics::Gauge>* stragglers_ = nullptr;
  metrics::Family<metrics::Counter>* rpcs_ = nullptr;
  metrics::Family<metrics::Histogram>* rpc_duration_ = nullptr;
  metrics::Gauge* oldest_queued_ = nullptr;
  metrics::Family<metrics::Gauge>* job_info_ = nullptr;
  metrics::Family<metrics::Gauge>* checkpoint_age_ = nullptr;
  metrics::Family<metrics::Gauge>* dir_bytes_ = nullptr;
  // The job_info_, checkpoint_age_ and dir_bytes_ series of the last scrape, three per job
  // (null: none), in that order (Collect, under source_mu_).
  std::vector<metrics::Gauge*> active_series_ ABSL_GUARDED_BY(source_mu_);
  metrics::Family<metrics::Gauge>* owner_workers_ = nullptr;
  metrics::Family<metrics::Gauge>* owner_queued_ = nullptr;
  // Their series of the last scrape (Collect, under source_mu_).
  std::vector<std::pair<metrics::Family<metrics::Gauge>*, metrics::Gauge*>> owner_series_
      ABSL_GUARDED_BY(source_mu_);

  absl::Mutex source_mu_;
  std::function<absl::StatusOr<StateCounts>()> source_ ABSL_GUARDED_BY(source_mu_);
  metrics::Family<metrics::Counter>* db_errors_ = nullptr;  // by kind
  std::function<std::map<std::string, int64_t>()> db_errors_source_ ABSL_GUARDED_BY(source_mu_);
  std::map<std::string, int64_t> db_errors_counted_ ABSL_GUARDED_BY(source_mu_);

  absl::Mutex stragglers_mu_;
  // Per job: its score series, then its flagged count.
  absl::flat_hash_map<std::string, std::vector<metrics::Gauge*>> straggler_series_
      ABSL_GUARDED_BY(stragglers_mu_);

  absl::Mutex methods_mu_;
  absl::flat_hash_map<std::string, MethodMetrics> methods_ ABSL_GUARDED_BY(methods_mu_);
};

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_COORDINATOR_METRICS_H_
