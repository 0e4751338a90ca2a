// ParallelTrainer: one rank of a 3D-parallel (dp x pp x tp) training job. It holds this rank's
// chunks of the model (one GptStage per virtual stage, each a Megatron tp shard), runs the
// pipeline schedule's actions for every step over a Transport (activations and gradients to
// the pipeline neighbours, tp all-reduces inside the layers), sums the tied embedding's
// gradient between the first and last stage, all-reduces gradients over the data-parallel
// group in buckets that start while backward still runs (or reduce-scatters them for ZeRO-1),
// clips by the global gradient norm and steps AdamW.
//
// Every layout trains to the numbers of LocalTrainer (one worker): step s trains on batch
// s-1 of the dataset (B = options.run.batch sequences); data-parallel replica d takes rows
// [d*B/dp, (d+1)*B/dp) and cuts them into micro-batches of micro_batch_size rows; the loss is
// the mean over all B*T tokens, so each micro-batch's backward is scaled by 1/(B*T). An
// evaluation runs the same micro-batches of each validation batch through the schedule's
// forwards only, so val_loss is LocalTrainer's for every layout.
//
// All ranks of a job call Create and Run with the same options except `rank`; every rank
// returns the same metrics for each step (loss and gradient norm are global).
#ifndef DTRAIN_WORKER_PARALLEL_PARALLEL_TRAINER_H_
#define DTRAIN_WORKER_PARALLEL_PARALLEL_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/backend.h"
#include "plan/ready_work.h"
#include "plan/schedule.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"
#include "worker/comm/transport.h"
#include "worker/model/gpt_stage.h"
#include "worker/model/optimizer.h"
#include "worker/parallel/checkpoint_writer.h"
#include "worker/parallel/final_checkpoint.h"
#include "worker/parallel/sharded_checkpoint.h"
#include "worker/training_run.h"

namespace dtrain::parallel {

struct ChunkRange {
  int first_layer = 0;
  int num_layers = 0;
};

// Test-only fault injection (dtrain-worker-testing's --test_only_skip_collective,
// --test_only_forward_delay and --test_only_stop_before_seal), for the tests of `dtrain
// diagnose` and of a frozen run; every field off by default.
struct TestOnlyFaults {
  // This rank's tensor-parallel group (its data-parallel one when tp=1) skips this sequence
  // number (comm::CollectiveOptions::test_only_skip_seq): a mismatched collective. -1: off.
  int64_t skip_collective_seq = -1;
  // F of micro-batch 0 of this step (1-based) sleeps `forward_delay` once its input arrived:
  // a rank stuck in compute (StageExecutor::SetTestOnlyForwardDelay). 0: off.
  int64_t forward_delay_step = 0;
  absl::Duration forward_delay = absl::ZeroDuration();
  // In the job's first run (attempt 0) only, rank 0 stops its own process (SIGSTOP) just before
  // it seals this step: a worker frozen in the middle of a checkpoint, which the test resumes
  // (SIGCONT) after the job was recovered elsewhere (CheckpointWriterOptions
  // .test_only_before_seal). 0: off.
  int64_t stop_before_seal_step = 0;
};

struct ParallelTrainingOptions {
  // The run, as one worker would train it (save_path: the final weights as one GPT-2
  // safetensors, exported from the shards by rank 0; dump_grads_path unused).
  TrainingRun run;
  // This rank's part of the job's plan (proto/plan.proto RankPlan, plan/rank_plan.h
  // RankPlanOf): its rank, the layout, schedule, micro-batches and its chunks. The plan checked
  // every rule of them (plan/job_plan.h MakeJobPlan) and the trainer checks none again. Empty
  // chunks: n_layer split evenly (what tests use).
  RankPlan plan;
  // The host of every rank (in rank order; only the entries of this rank's dp group are read: the
  // worker daemon names them from the coordinator's JobAssignment.dp_host_index), which picks the
  // data-parallel all-reduce: with several hosts and several members of a dp group on one of
  // them, HierarchicalAllReduce (inside each host, then across hosts), else the flat ring.
  // Empty: every rank on one host.
  std::vector<std::string> rank_hosts;
  absl::Duration comm_timeout = absl::Seconds(60);  // every send, receive and collective
  // How long the last step's checkpoint (and rank 0's export of it) is tried again when a disk
  // cannot hold it.
  FinalCheckpointRetry final_checkpoint_retry;
  // Set when the job is cancelled (the worker daemon's; may be null): ends rank 0's wait for
  // space to export the weights, when its peers have already left the run.
  const std::atomic<bool>* stop = nullptr;
  // The order the stage runs its actions in (plan/ready_work.h ChooseExecution: unset, ready
  // work for ZB-H1; the list's order with tp > 1 whatever is asked).
  std::optional<pipeline::Execution> execution;
  // When a fused backward sends its input gradient (StageExecutor::set_gradient_release): after
  // its B part; kAfterWeights only to measure the textbook 1F1B (pipeline_bubble_benchmark).
  pipeline::GradientRelease gradient_release = pipeline::GradientRelease::kAfterInput;
  // GPU ranks (and --device=cpu-staging): collectives of device memory are staged through pinned
  // host buffers in chunks of this size, so the copy of one chunk overlaps the collective of the
  // previous (device_staging.h). The same chunks on every backend.
  int64_t staging_chunk_bytes = 1 << 20;
  // Called after every collective this rank runs (op: "all_reduce", "reduce_scatter",
  // "all_gather", "barrier"; payload bytes; wall seconds), from the training thread or the
  // gradient sync thread: must be thread-safe. For metrics; may be empty.
  std::function<void(const char* op, int64_t bytes, double seconds)> on_collective;
  TestOnlyFaults test_only;
};

// Statistics of the run so far, for tests and metrics.
struct ParallelRunStats {
  // Most micro-batch activations held at once (a chunk's forward done, its backward not yet),
  // summed over this rank's chunks.
  int peak_live_activations = 0;
  // Seconds the data-parallel gradient reduction ran while backward was still computing,
  // and in total (last step).
  double dp_overlap_seconds = 0.0;
  double dp_reduce_seconds = 0.0;
  // Gradient reductions (dp buckets, tied embedding) started before backward ended (last step).
  int reductions_started_in_backward = 0;
  bool dp_hierarchical = false;  // the dp all-reduce goes through HierarchicalAllReduce
  // The dp buckets are all-reduced in place, over gradient buffers that the dp group's ranks
  // share on one host (comm/collectives/allreduce_shared.h); false: through the ring.
  bool dp_shared_buffers = false;
  // Compute seconds of the last step by action kind, summed over its micro-batches and chunks
  // (tp all-reduces inside the layers included): what one F, B or W costs on this stage.
  double forward_seconds = 0, backward_input_seconds = 0, backward_weight_seconds = 0;
  // Staging (device_staging.h; zero on the CPU backend), last step: bytes copied each way
  // summed, seconds the rank waited for copies, and seconds of chunked collectives during which
  // the next chunk's copy could run.
  int64_t staged_bytes = 0;
  double staging_wait_seconds = 0, staging_overlapped_seconds = 0;
};

struct SyncChunk;  // gradient_sync.h

class ParallelTrainer {
 public:
  // Trusts options.plan (the plan checked the layout, schedule and batch arithmetic); checks
  // only what this process holds: the transport is the plan's rank of dp*pp*tp, rank_hosts has
  // one entry per rank, save_path has a checkpoint_dir. `transport` must outlive the trainer. With
  // resume_from, the checkpoint's step is read first: `steps` not beyond it is InvalidArgument
  // (model::CheckStepsBeyond) on every rank before any shard is loaded, so no rank writes while
  // another still reads.
  static absl::StatusOr<std::unique_ptr<ParallelTrainer>> Create(kernels::Backend* backend,
                                                                 comm::Transport* transport,
                                                                 ParallelTrainingOptions options);
  ~ParallelTrainer();

  // Runs the remaining steps (RunTrainingSteps), reporting through `callbacks` on every rank:
  // a checkpoint once this rank's files of it are durable, on rank 0 once it sealed the step
  // (manifest, then `latest`). Checkpoints are snapshots written by a CheckpointWriter
  // (checkpoint_writer.h) while training goes on; the last is waited for before Run returns.
  // On an error the other ranks are told at once (AbortJob).
  absl::Status Run(const TrainingCallbacks& callbacks);

  int64_t start_step() const { return start_step_; }
  // The absolute step directory this run resumed from; "" when it started fresh.
  const std::string& resumed_from() const { return resumed_from_; }
  // Why that is not the job's newest sealed step (it was damaged: model::CheckpointStep's
  // note), reported by Run as a warning; "" otherwise.
  const std::string& resume_note() const { return resume_note_; }
  int num_chunks() const;
  // Virtual stage i's model chunk and its optimizer (covering its ZeRO-1 shard only).
  model::GptStage& chunk(int i);
  model::AdamW& optimizer(int i);
  // The actions this rank ran in the last step, in order.
  const std::vector<pipeline::Action>& last_trace() const { return last_trace_; }
  const ParallelRunStats& stats() const { return stats_; }
  // How the dp gradient buckets are all-reduced on one host, for the worker's log: over buffers
  // the dp group shares (stats().dp_shared_buffers), or through the ring and why; "" without dp
  // buckets or with the hierarchy (several hosts). Run warns (dp member 0) when shared buffers
  // were possible but could not be had.
  const std::string& dp_gradient_path() const { return dp_gradient_path_; }

 private:
  struct Chunk;
  class StepRunner;
  ParallelTrainer() = default;
  // `checkpoint_asked`: this rank was asked for a checkpoint; the step's all-reduce tells every
  // rank whether any was (TrainStepMetrics::checkpoint_requested).
  absl::StatusOr<TrainStepMetrics> TrainStep(int64_t step, bool checkpoint_asked = false);
  // The validation loss after `step` (TrainingRun::eval_*): the schedule's forwards only, on
  // every rank, for each validation batch; the mean loss all-reduced over the job.
  absl::StatusOr<double> Evaluate(int64_t step);
  absl::StatusOr<double> OwnedSquaredNorm();
  // Runs a collective of `floats` floats, reporting it to options_.on_collective.
  absl::Status Timed(const char* op, int64_t floats,
                     const std::function<absl::Status()>& collective);
  // The run's checkpoint writer (its token agreed on by every rank first).
  absl::Status StartWriter(const TrainingCallbacks& callbacks);
  // At a checkpoint step's boundary: this rank's state snapshot handed to writer_.
  absl::Status StartCheckpoint(int64_t step, bool keep);
  absl::Status RunSteps(const TrainingCallbacks& callbacks);
  // Every rank, after the last step's checkpoint: when rank 0 skipped it for want of space
  // (*final_skipped says why), it is written again until it fits (final_checkpoint.h);
  // *final_skipped is "" once it sealed.
  absl::Status AwaitFinalCheckpoint(const TrainingCallbacks& callbacks,
                                    const CheckpointHooks& checkpoints, std::string* final_skipped);
  // Rank 0: the weights exported from the sealed `step_dir` into run.save_path, waiting for
  // space when the disk cannot hold them (its peers may have left: Options::stop ends the wait).
  absl::Status ExportWeights(const std::string& step_dir, const TrainingCallbacks& callbacks);
  ShardIdentity Identity() const;
  // Puts the chunks' gradients in buffers the dp group shares, when it can (set-up).
  static absl::Status ShareGradients(ParallelTrainer& t, kernels::Backend* backend,
                                     std::vector<SyncChunk>& chunks);

  kernels::Backend* backend_ = nullptr;
  comm::Transport* transport_ = nullptr;
  ParallelTrainingOptions options_;
  std::vector<Chunk> chunks_;
  int64_t start_step_ = 0;
  std::string resumed_from_;
  std::string resume_note_;
  std::string dp_gradient_path_;
  bool dp_shared_fell_back_ = false;        // one host and host memory, but no shared buffers
  std::vector<std::string> damaged_steps_;  // skipped when resuming (CheckpointStep::damaged)
  std::vector<pipeline::Action> last_trace_;
  ParallelRunStats stats_;
  std::unique_ptr<StepRunner> runner_;
  std::unique_ptr<CheckpointWriter> writer_;  // with a checkpoint_dir, once Run started
};

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_PARALLEL_TRAINER_H_
