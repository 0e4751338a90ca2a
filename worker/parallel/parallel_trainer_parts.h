#ifndef DTRAIN_WORKER_PARALLEL_PARALLEL_TRAINER_PARTS_H_
#define DTRAIN_WORKER_PARALLEL_PARALLEL_TRAINER_PARTS_H_

// For parallel_trainer.cc and parallel_trainer_checkpoints.cc only: the parts of a
// ParallelTrainer that the methods of both files use.

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "worker/comm/collectives/allreduce_hierarchical.h"
#include "worker/comm/collectives/allreduce_shared.h"
#include "worker/comm/collectives/group.h"
#include "worker/comm/p2p.h"
#include "worker/model/token_dataset.h"
#include "worker/parallel/device_staging.h"
#include "worker/parallel/gradient_sync.h"
#include "worker/parallel/parallel_trainer.h"
#include "worker/parallel/stage_executor.h"

namespace dtrain::parallel {

using TrainerClock = std::chrono::steady_clock;

inline double SecondsSince(TrainerClock::time_point start) {
  return std::chrono::duration<double>(TrainerClock::now() - start).count();
}

// Host memory the backend's asynchronous copies may use (Backend::RegisterPinned) for as long as
// this lives; destroyed before the memory is unmapped.
class PinnedRegistration {
 public:
  static absl::StatusOr<std::unique_ptr<PinnedRegistration>> Create(kernels::Backend* backend,
                                                                    absl::Span<float> memory) {
    const size_t bytes = memory.size() * sizeof(float);
    if (absl::Status s = backend->RegisterPinned(memory.data(), bytes); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("registering the dp group's shared gradient "
                                                 "buffers (",
                                                 bytes,
                                                 " bytes) for the device's "
                                                 "copies: ",
                                                 s.message()));
    }
    return std::unique_ptr<PinnedRegistration>(new PinnedRegistration(backend, memory.data()));
  }
  ~PinnedRegistration() { backend_->UnregisterPinned(ptr_); }

 private:
  PinnedRegistration(kernels::Backend* backend, void* ptr) : backend_(backend), ptr_(ptr) {}
  kernels::Backend* const backend_;
  void* const ptr_;
};

struct ParallelTrainer::Chunk {
  std::unique_ptr<model::GptStage> stage;
  std::unique_ptr<model::AdamW> optimizer;
};

// Everything a step needs besides the chunks: groups, links, the executor and the sync thread.
class ParallelTrainer::StepRunner {
 public:
  RankAssignment coord;  // this rank's dp_rank, pp_rank, tp_rank
  std::optional<comm::Group> tp, dp, tied, world;
  std::optional<comm::HierarchicalAllReduce> dp_sum;  // over dp: by host, or the flat ring
  // Over dp when its ranks share a host (and the backend's memory is host memory): buffers they
  // all map, which hold the chunks' gradients, so dp buckets are all-reduced in place.
  std::unique_ptr<comm::SharedAllReduce> dp_shared;
  // dp_shared's buffer as the host side of the backend's copies, where the backend stages.
  std::unique_ptr<PinnedRegistration> dp_shared_pinned;
  std::unique_ptr<DeviceStaging> staging;  // first: the others hold its buffers
  std::unique_ptr<comm::StageLinks> links;
  std::unique_ptr<StageExecutor> executor;
  std::unique_ptr<GradientSync> sync;
  std::unique_ptr<model::TokenDataset> data;
  std::unique_ptr<model::TokenDataset> eval_data;  // with eval_every, where data is
  pipeline::ScheduleSpec schedule;
  std::vector<pipeline::Action> actions;
  std::vector<pipeline::Action> forwards;  // the F actions of `actions`, in order
  int micro_batch_rows = 0;
  double tp_seconds = 0;  // time inside tp all-reduces (part of the layers' compute calls)
};

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_PARALLEL_TRAINER_PARTS_H_
