#include "worker/daemon/worker_metrics.h"

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::worker {
namespace {

const char* KindName(comm::MessageKind kind) {
  switch (kind) {
    case comm::MessageKind::kActivation:
      return "activation";
    case comm::MessageKind::kGradient:
      return "gradient";
    case comm::MessageKind::kCollective:
      return "collective";
    case comm::MessageKind::kAbort:
      return "abort";
  }
  return "other";
}

// "job_id", not "job": Prometheus sets `job` on every series to the scrape job's name.
const std::vector<std::string> kJob = {"job_id", "rank", "dp", "pp", "tp"};

// Steps and checkpoint writes: 1ms .. 131s; collectives: 100us .. 52s.
metrics::Buckets StepBuckets() { return metrics::ExponentialBuckets(0.001, 2, 18); }
metrics::Buckets CollectiveBuckets() { return metrics::ExponentialBuckets(0.0001, 2, 20); }

std::vector<std::string> With(std::vector<std::string> names, std::vector<std::string> more) {
  names.insert(names.end(), more.begin(), more.end());
  return names;
}

}  // namespace

const char* WorkerMetrics::SizeClass(int64_t bytes) {
  if (bytes < (int64_t{64} << 10)) return "lt_64KiB";
  if (bytes < (int64_t{1} << 20)) return "64KiB_1MiB";
  if (bytes < (int64_t{16} << 20)) return "1MiB_16MiB";
  return "ge_16MiB";
}

absl::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Create(metrics::Registry* registry,
                                                                     const std::string& worker_id,
                                                                     kernels::Backend* backend) {
  std::unique_ptr<WorkerMetrics> m(new WorkerMetrics());
  m->registry_ = registry;
  m->backend_ = backend;
  metrics::Registry& r = *registry;
  ASSIGN_OR_RETURN(m->info_,
                   r.AddGauge("dtrain_worker_info", "Always 1: this worker's id and device.",
                              {"worker_id", "device"}));
  ASSIGN_OR_RETURN(m->memory_, r.AddGauge("dtrain_worker_device_memory_used_bytes",
                                          "Device memory in use (CPU: what the backend holds; "
                                          "CUDA: the device's used memory).",
                                          {"device"}));
  ASSIGN_OR_RETURN(m->running_, r.AddGauge("dtrain_worker_job_running",
                                           "1 while this worker runs the job as this rank, 0 "
                                           "after it ended.",
                                           kJob));
  ASSIGN_OR_RETURN(m->step_seconds_, r.AddHistogram("dtrain_worker_step_duration_seconds",
                                                    "Wall time of one training step on this rank.",
                                                    kJob, StepBuckets()));
  ASSIGN_OR_RETURN(m->steps_, r.AddCounter("dtrain_worker_steps_total",
                                           "Training steps this rank finished.", kJob));
  ASSIGN_OR_RETURN(m->step_,
                   r.AddGauge("dtrain_worker_step", "Last step this rank finished.", kJob));
  ASSIGN_OR_RETURN(m->tokens_per_s_,
                   r.AddGauge("dtrain_worker_tokens_per_second",
                              "Tokens of the whole batch per second of the last step.", kJob));
  ASSIGN_OR_RETURN(m->loss_, r.AddGauge("dtrain_worker_loss",
                                        "Mean cross-entropy of the last step's batch.", kJob));
  ASSIGN_OR_RETURN(m->val_loss_,
                   r.AddGauge("dtrain_worker_val_loss",
                              "Mean loss over the validation batches at the last evaluation "
                              "(JobSpec.eval); absent before the first.",
                              kJob));
  ASSIGN_OR_RETURN(m->val_step_,
                   r.AddGauge("dtrain_worker_val_step", "Step of the last evaluation.", kJob));
  ASSIGN_OR_RETURN(
      m->lr_, r.AddGauge("dtrain_worker_learning_rate", "Learning rate of the last step.", kJob));
  ASSIGN_OR_RETURN(m->grad_norm_, r.AddGauge("dtrain_worker_grad_norm",
                                             "Global gradient norm of the last step, before "
                                             "clipping.",
                                             kJob));
  ASSIGN_OR_RETURN(m->compute_, r.AddCounter("dtrain_worker_compute_seconds_total",
                                             "Seconds this rank spent in kernels.", kJob));
  ASSIGN_OR_RETURN(
      m->communication_,
      r.AddCounter("dtrain_worker_communication_seconds_total",
                   "Seconds this rank spent in collectives and finishing sends.", kJob));
  ASSIGN_OR_RETURN(m->bubble_, r.AddCounter("dtrain_worker_bubble_seconds_total",
                                            "Seconds this rank waited for a pipeline "
                                            "neighbour's activation or gradient.",
                                            kJob));
  ASSIGN_OR_RETURN(m->sent_, r.AddCounter("dtrain_worker_sent_bytes_total",
                                          "Payload bytes sent to a peer rank, by kind.",
                                          With(kJob, {"peer", "kind"})));
  ASSIGN_OR_RETURN(m->received_, r.AddCounter("dtrain_worker_received_bytes_total",
                                              "Payload bytes received from a peer rank, by kind.",
                                              With(kJob, {"peer", "kind"})));
  ASSIGN_OR_RETURN(m->data_path_,
                   r.AddGauge("dtrain_worker_peer_data_path",
                              "1 for the path data to (send) or from (receive) a peer rank takes: "
                              "shared memory on one host, else grpc.",
                              With(kJob, {"peer", "direction", "path"})));
  ASSIGN_OR_RETURN(m->collective_,
                   r.AddHistogram("dtrain_worker_collective_duration_seconds",
                                  "Wall time of one collective, by operation and payload size.",
                                  With(kJob, {"op", "size_class"}), CollectiveBuckets()));
  ASSIGN_OR_RETURN(m->checkpoint_,
                   r.AddHistogram("dtrain_worker_checkpoint_write_seconds",
                                  "Time to write this rank's checkpoint shard (and the "
                                  "manifest on rank 0).",
                                  kJob, StepBuckets()));
  ASSIGN_OR_RETURN(m->checkpoints_skipped_,
                   r.AddCounter("dtrain_worker_checkpoints_skipped_total",
                                "Checkpoint steps the job skipped because a disk could not hold "
                                "a rank's part (training goes on; counted by the job's rank 0, "
                                "whose log line names every rank short of space).",
                                kJob));
  m->buckets_ = {{m->step_seconds_, StepBuckets()},
                 {m->collective_, CollectiveBuckets()},
                 {m->checkpoint_, StepBuckets()}};
  const std::string device = backend->info().name;
  m->info_->Add({{"worker_id", worker_id}, {"device", device}}).Set(1);
  WorkerMetrics* self = m.get();
  m->hook_ = r.AddCollectHook([self, device] {
    absl::StatusOr<int64_t> used = self->backend_->MemoryInUse();
    if (used.ok()) self->memory_->Add({{"device", device}}).Set(static_cast<double>(*used));
  });
  return m;
}

WorkerMetrics::~WorkerMetrics() { registry_->RemoveCollectHook(hook_); }

metrics::Labels WorkerMetrics::JobLabels() const {
  return {{"job_id", job_.job},
          {"rank", absl::StrCat(job_.rank)},
          {"dp", absl::StrCat(job_.dp)},
          {"pp", absl::StrCat(job_.pp)},
          {"tp", absl::StrCat(job_.tp)}};
}

template <typename T>
T& WorkerMetrics::Child(metrics::Family<T>* family, const metrics::Labels& extra) {
  metrics::Labels labels = JobLabels();
  labels.insert(extra.begin(), extra.end());
  T* child;
  if constexpr (std::is_same_v<T, metrics::Histogram>) {
    child = &family->Add(labels, buckets_.at(family));
  } else {
    child = &family->Add(labels);
  }
  auto [it, inserted] = created_.try_emplace({family, labels});
  if (inserted) it->second = [family, child] { family->Remove(child); };
  return *child;
}

void WorkerMetrics::DropJobSeries() {
  for (auto& [series, remove] : created_) remove();
  created_.clear();
  sent_cache_.clear();
  received_cache_.clear();
  collective_cache_.clear();
}

void WorkerMetrics::StartJob(const RankLabels& labels) {
  absl::MutexLock lock(&mu_);
  DropJobSeries();
  job_ = labels;
  has_job_ = true;
  // Create the job's series now, so they are exported (at 0) from the job's first scrape.
  Child(running_).Set(1);
  Child(steps_);
  Child(step_);
  Child(compute_);
  Child(communication_);
  Child(bubble_);
  Child(step_seconds_);
  Child(checkpoints_skipped_);  // at 0 from the start, so that a rule sees its first increase
}

void WorkerMetrics::EndJob() {
  absl::MutexLock lock(&mu_);
  if (has_job_) Child(running_).Set(0);
}

void WorkerMetrics::OnStep(const TrainStepMetrics& s) {
  absl::MutexLock lock(&mu_);
  if (!has_job_) return;
  Child(step_seconds_).Observe(s.step_seconds);
  Child(steps_).Increment();
  Child(step_).Set(static_cast<double>(s.step));
  // Gauges that only mean something once a step ran appear with the first one.
  Child(tokens_per_s_).Set(s.tokens_per_s);
  Child(loss_).Set(s.loss);
  if (s.val_loss.has_value()) {
    Child(val_loss_).Set(*s.val_loss);
    Child(val_step_).Set(static_cast<double>(s.step));
  }
  Child(lr_).Set(s.lr);
  Child(grad_norm_).Set(s.grad_norm);
  Child(compute_).Increment(s.compute_seconds);
  Child(communication_).Increment(s.communication_seconds);
  Child(bubble_).Increment(s.bubble_seconds);
}

void WorkerMetrics::OnCollective(const char* op, int64_t bytes, double seconds) {
  absl::MutexLock lock(&mu_);
  if (!has_job_) return;
  const char* size_class = SizeClass(bytes);
  metrics::Histogram*& h = collective_cache_[{op, size_class}];
  if (h == nullptr) h = &Child(collective_, {{"op", op}, {"size_class", size_class}});
  h->Observe(seconds);
}

void WorkerMetrics::OnCheckpoint(double seconds) {
  absl::MutexLock lock(&mu_);
  if (!has_job_) return;
  Child(checkpoint_).Observe(seconds);
}

void WorkerMetrics::OnCheckpointSkipped() {
  absl::MutexLock lock(&mu_);
  if (!has_job_) return;
  Child(checkpoints_skipped_).Increment();
}

metrics::Counter& WorkerMetrics::Bytes(metrics::Family<metrics::Counter>* family, int peer,
                                       comm::MessageKind kind) {
  absl::MutexLock lock(&mu_);
  auto& cache = family == sent_ ? sent_cache_ : received_cache_;
  metrics::Counter*& counter = cache[{peer, static_cast<int>(kind)}];
  if (counter == nullptr) {
    counter = &Child(family, {{"peer", absl::StrCat(peer)}, {"kind", KindName(kind)}});
  }
  return *counter;
}

void WorkerMetrics::OnSent(int peer, comm::MessageKind kind, int64_t bytes) {
  Bytes(sent_, peer, kind).Increment(static_cast<double>(bytes));
}

void WorkerMetrics::OnReceived(int peer, comm::MessageKind kind, int64_t bytes) {
  Bytes(received_, peer, kind).Increment(static_cast<double>(bytes));
}

void WorkerMetrics::OnDataPath(int peer, bool incoming, const char* path) {
  absl::MutexLock lock(&mu_);
  if (!has_job_) return;
  Child(
      data_path_,
      {{"peer", absl::StrCat(peer)}, {"direction", incoming ? "receive" : "send"}, {"path", path}})
      .Set(1);
}

}  // namespace dtrain::worker
