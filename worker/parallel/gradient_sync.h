// GradientSync: the gradient reductions that follow a rank's backward, run on a thread of their
// own so they overlap the backward that is still computing.
//
// Per chunk (a GptStage's flat gradient buffer of `size` floats), two kinds of work:
//  * the tied embedding: the first pipeline stage (wte as the embedding) and the last (its tied
//    head copy) sum wte's gradient over the tied group once it is final on both;
//  * data parallelism: the buffer is cut into buckets of `bucket_floats` from its end (backward
//    finishes the buffer from the end: GptStage::BackwardWeight's `ready` ranges), and each
//    bucket is all-reduced (sum) over the data-parallel group as soon as backward has passed
//    it. A bucket that overlaps wte waits for the tied sum, so replicas reduce the summed value.
// With ZeRO-1 (`dp` null here) the trainer reduce-scatters after Finish instead.
//
// Threading: MarkReady and Finish are called by the training thread; the reductions run on
// the sync thread, which alone uses the dp and tied groups. Every member of a group sees the
// same ready order (the same schedule), so they call collectives in the same order.
#ifndef DTRAIN_WORKER_PARALLEL_GRADIENT_SYNC_H_
#define DTRAIN_WORKER_PARALLEL_GRADIENT_SYNC_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/collectives/allreduce_hierarchical.h"
#include "worker/comm/collectives/allreduce_shared.h"
#include "worker/comm/collectives/group.h"
#include "worker/parallel/device_staging.h"

namespace dtrain::parallel {

struct SyncChunk {
  float* grads = nullptr;  // device memory, `size` floats (staged to the host to be reduced)
  int64_t size = 0;
  // wte's range in the buffer when this chunk is a member of the tied-embedding group.
  std::optional<std::pair<int64_t, int64_t>> tied_range;
  // With `dp_shared` on a backend that stages: this chunk's `size` floats in the shared buffers
  // (registered with the backend), where its buckets are staged and all-reduced in place.
  float* host_mirror = nullptr;
};

class GradientSync {
 public:
  // `staging`, `dp` (the data-parallel all-reduce, flat or hierarchical; null: none),
  // `dp_shared` (null, or buffers shared by the dp group on one host that hold every chunk's
  // gradients: buckets are then all-reduced in place, collectives/allreduce_shared.h) and `tied`
  // (null: this rank holds no tied copy, or pp == 1) must outlive this object. A bucket is staged
  // to the host after the kernels enqueued when the sync thread takes it (a superset of those that
  // produced it). `on_reduced(bytes, seconds)`, if set, is called on the sync thread after each
  // all-reduce.
  GradientSync(std::vector<SyncChunk> chunks, DeviceStaging* staging,
               comm::HierarchicalAllReduce* dp, comm::SharedAllReduce* dp_shared, comm::Group* tied,
               int64_t bucket_floats,
               std::function<void(int64_t bytes, double seconds)> on_reduced = {});
  ~GradientSync();

  // Starts a step: nothing of any chunk is final yet.
  void StartStep();
  // The gradients of chunk `c` from `begin` to its end are final for this step. Queues the
  // reductions that became possible.
  void MarkReady(int c, int64_t begin);
  // Marks every chunk final, waits for all queued reductions and returns the first error.
  absl::Status Finish();

  // Seconds the sync thread spent reducing during the last step, and how much of it before
  // Finish was called (overlapped with backward).
  double reduce_seconds() const { return reduce_seconds_; }
  // Reductions queued before Finish in the last step: the ones that could overlap backward.
  int queued_early() const { return queued_early_; }
  double overlap_seconds() const { return overlap_seconds_; }

 private:
  struct Task {
    int chunk;
    int64_t begin, end;
    bool tied;  // the tied-embedding sum rather than a dp bucket
  };
  struct ChunkState {
    int64_t frontier = 0;  // [frontier, size) is final
    int64_t next_end = 0;  // end of the next bucket to queue; 0 when all are queued
    bool tied_queued = false;
  };
  void QueueReady(int c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();
  absl::Status RunTask(const Task& task);

  const std::vector<SyncChunk> chunks_;
  DeviceStaging* const staging_;
  comm::HierarchicalAllReduce* const dp_;
  comm::SharedAllReduce* const dp_shared_;
  comm::Group* const tied_;
  const int64_t bucket_floats_;
  const std::function<void(int64_t, double)> on_reduced_;
  std::vector<ChunkState> state_;  // training thread only

  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time finish_called_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  double busy_ ABSL_GUARDED_BY(mu_) = 0, overlapped_ ABSL_GUARDED_BY(mu_) = 0;
  double reduce_seconds_ = 0, overlap_seconds_ = 0;
  int queued_ ABSL_GUARDED_BY(mu_) = 0;
  int queued_early_ = 0;
  std::thread thread_;
};

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_GRADIENT_SYNC_H_
