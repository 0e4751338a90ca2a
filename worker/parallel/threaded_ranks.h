// Benchmark support: every rank of a job as a thread of this process, each with its own
// one-thread CPU backend and ParallelTrainer over the transport given for it (an in-process
// hub's, possibly wrapped), run to the end.
//
//   comm::InprocHub hub(2);
//   ASSIGN_OR_RETURN(std::vector<RankRun> runs,
//                    TrainRanksOnThreads({hub.transport(0), hub.transport(1)},
//                                        [&](int rank) { return OptionsOf(rank); }));
#ifndef DTRAIN_WORKER_PARALLEL_THREADED_RANKS_H_
#define DTRAIN_WORKER_PARALLEL_THREADED_RANKS_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/transport.h"
#include "worker/parallel/parallel_trainer.h"

namespace dtrain::parallel {

struct RankRun {
  std::vector<TrainStepMetrics> steps;       // every step, in order
  ParallelRunStats stats;                    // at the end
  std::vector<ParallelRunStats> step_stats;  // after each step, in order
  std::vector<pipeline::Action> last_trace;  // the actions of its last step, in the order run
  std::vector<float> params;                 // its chunks' parameters at the end, in order
};

// A dp=1, tp=1 pipeline of `stages` ranks training a byte-level GPT-2 of width n_embd (heads of
// 32) and layers_per_stage blocks per stage on `data`, one sequence per micro-batch.
struct PipelineJob {
  int stages = 2;
  int micro_batches = 4;
  int steps = 4;
  int n_embd = 128;
  int seq = 64;
  int layers_per_stage = 2;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  std::string data;
  std::optional<pipeline::Execution> execution;  // ParallelTrainingOptions::execution
  pipeline::GradientRelease gradient_release =   // ParallelTrainingOptions::gradient_release
      pipeline::GradientRelease::kAfterInput;
};
ParallelTrainingOptions PipelineOptions(const PipelineJob& job);

// What a job plan gives rank `rank` of `layout` (a layout with every field set; its schedule's
// text parsed by plan/spec_enums.h) for a batch of `batch` sequences in micro-batches of
// `micro_batch_size`, chunks left empty (n_layer split evenly): for the tests and benchmarks
// that make trainers without a JobSpec.
RankPlan PlannedRank(const ParallelLayout& layout, int batch, int micro_batch_size, int rank = 0);

// `options(rank)` for each rank of `transports` (options.plan's rank is set here). The first rank's
// error, if any.
absl::StatusOr<std::vector<RankRun>> TrainRanksOnThreads(
    const std::vector<comm::Transport*>& transports,
    const std::function<ParallelTrainingOptions(int rank)>& options);

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_THREADED_RANKS_H_
