// WorkerMetrics: what a worker exports at /metrics (common/metrics), fed by the job it runs.
//
// Job series carry the labels job_id, rank, dp, pp, tp (the rank's coordinates; `job` is
// Prometheus' own label, the scrape job), so a dashboard
// can line up the ranks of one job and spot a straggler. They stay after the job ends (its
// final values remain scrapeable) and are removed when the worker starts its next job.
//
//   dtrain_worker_info{worker_id,device}                       1
//   dtrain_worker_job_running                                  1 from StartJob to EndJob, then 0
//   dtrain_worker_device_memory_used_bytes{device}             per scrape, Backend::MemoryInUse
//   dtrain_worker_step_duration_seconds                        histogram
//   dtrain_worker_steps_total, dtrain_worker_step               counter, last step
//   dtrain_worker_tokens_per_second, _loss, _learning_rate, _grad_norm   gauges
//   dtrain_worker_val_loss, dtrain_worker_val_step     gauges, from the first evaluation on
//   dtrain_worker_{compute,communication,bubble}_seconds_total          counters
//   dtrain_worker_{sent,received}_bytes_total{peer,kind}      kind: activation|gradient|collective
//   dtrain_worker_peer_data_path{peer,direction,path}         1: direction send|receive, path
//                                                             "shared memory"|grpc (comm::DataPath)
//   dtrain_worker_collective_duration_seconds{op,size_class}  histogram
//   dtrain_worker_checkpoint_write_seconds                     histogram
//   dtrain_worker_checkpoints_skipped_total                    counter: steps whose checkpoint
//                                                             the job skipped (a disk could not
//                                                             hold a rank's part), on rank 0
//
// Thread safety: every method may be called from any thread.
#ifndef DTRAIN_WORKER_DAEMON_WORKER_METRICS_H_
#define DTRAIN_WORKER_DAEMON_WORKER_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/registry.h"
#include "kernels/backend.h"
#include "worker/comm/observed_transport.h"
#include "worker/local_trainer.h"

namespace dtrain::worker {

struct RankLabels {
  std::string job;
  int rank = 0, dp = 0, pp = 0, tp = 0;
};

class WorkerMetrics final : public comm::TransportObserver {
 public:
  // Registers the families in `registry` (which must outlive this object) and a scrape hook
  // reading `backend`'s memory in use.
  static absl::StatusOr<std::unique_ptr<WorkerMetrics>> Create(metrics::Registry* registry,
                                                               const std::string& worker_id,
                                                               kernels::Backend* backend);
  ~WorkerMetrics() override;

  // The rank this worker runs from now on; drops the previous job's series.
  void StartJob(const RankLabels& labels);
  // The job ended (any outcome): its series stay, with dtrain_worker_job_running at 0.
  void EndJob();
  void OnStep(const TrainStepMetrics& step);
  void OnCollective(const char* op, int64_t bytes, double seconds);
  void OnCheckpoint(double seconds);
  // The job skipped a checkpoint step (its rank 0 counts it, once for all ranks).
  void OnCheckpointSkipped();
  void OnSent(int peer, comm::MessageKind kind, int64_t bytes) override;
  void OnReceived(int peer, comm::MessageKind kind, int64_t bytes) override;
  // The data path to (incoming: from) `peer` was set up: `path` is comm::DataPathName's.
  void OnDataPath(int peer, bool incoming, const char* path);

  // "lt_64KiB", "64KiB_1MiB", "1MiB_16MiB", "ge_16MiB".
  static const char* SizeClass(int64_t bytes);

 private:
  WorkerMetrics() = default;
  metrics::Labels JobLabels() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The child of `family` for the current job plus `extra` labels, remembered for removal.
  template <typename T>
  T& Child(metrics::Family<T>* family, const metrics::Labels& extra = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  metrics::Counter& Bytes(metrics::Family<metrics::Counter>* family, int peer,
                          comm::MessageKind kind);
  void DropJobSeries() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  metrics::Registry* registry_ = nullptr;
  kernels::Backend* backend_ = nullptr;
  metrics::Registry::HookId hook_ = 0;
  metrics::Family<metrics::Gauge>* info_ = nullptr;
  metrics::Family<metrics::Gauge>* memory_ = nullptr;
  metrics::Family<metrics::Gauge>* running_ = nullptr;
  metrics::Family<metrics::Histogram>* step_seconds_ = nullptr;
  metrics::Family<metrics::Counter>* steps_ = nullptr;
  metrics::Family<metrics::Gauge>* step_ = nullptr;
  metrics::Family<metrics::Gauge>* tokens_per_s_ = nullptr;
  metrics::Family<metrics::Gauge>* loss_ = nullptr;
  metrics::Family<metrics::Gauge>* val_loss_ = nullptr;  // and its step
  metrics::Family<metrics::Gauge>* val_step_ = nullptr;
  metrics::Family<metrics::Gauge>* lr_ = nullptr;
  metrics::Family<metrics::Gauge>* grad_norm_ = nullptr;
  metrics::Family<metrics::Counter>* compute_ = nullptr;
  metrics::Family<metrics::Counter>* communication_ = nullptr;
  metrics::Family<metrics::Counter>* bubble_ = nullptr;
  metrics::Family<metrics::Counter>* sent_ = nullptr;
  metrics::Family<metrics::Counter>* received_ = nullptr;
  metrics::Family<metrics::Gauge>* data_path_ = nullptr;
  metrics::Family<metrics::Histogram>* collective_ = nullptr;
  metrics::Family<metrics::Histogram>* checkpoint_ = nullptr;
  metrics::Family<metrics::Counter>* checkpoints_skipped_ = nullptr;
  // Each histogram family's buckets (prometheus-cpp takes them with every child); set in Create.
  std::map<const metrics::Family<metrics::Histogram>*, metrics::Buckets> buckets_;

  mutable absl::Mutex mu_;
  RankLabels job_ ABSL_GUARDED_BY(mu_);
  bool has_job_ ABSL_GUARDED_BY(mu_) = false;
  // The series created for the current job (family, labels), each with its removal; all are
  // removed at the next StartJob.
  std::map<std::pair<const void*, metrics::Labels>, std::function<void()>> created_
      ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, int>, metrics::Counter*> sent_cache_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, int>, metrics::Counter*> received_cache_ ABSL_GUARDED_BY(mu_);
  // Collectives run many times a step (tp all-reduces in every layer): children by
  // (op, size class), so the hot path is one small map lookup.
  std::map<std::pair<std::string, const char*>, metrics::Histogram*> collective_cache_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_WORKER_METRICS_H_
