// TrainingRun: one training run as both trainers take it (LocalTrainer on one worker,
// parallel::ParallelTrainer for one rank of a multi-worker job, which adds only its layout and
// rank), and the callbacks through which both report steps and checkpoints. The worker daemon
// (worker/daemon/job_runner.h) and dtrain-local build a TrainingRun once and hand it to either.
//
//   TrainingRun run;                       // or worker::TrainingRunOf(planned_spec, job_dir)
//   run.model = ...; run.data_path = "data/demo.txt"; run.steps = 200;
//   TrainingCallbacks callbacks;
//   callbacks.step = [](const TrainStepMetrics& m) { return absl::OkStatus(); };
//   callbacks.checkpoint = [](const CheckpointWritten& c) { ... };
//   ASSIGN_OR_RETURN(auto trainer, LocalTrainer::Create(backend, run));
//   RETURN_IF_ERROR(trainer->Run(callbacks));
#ifndef DTRAIN_WORKER_TRAINING_RUN_H_
#define DTRAIN_WORKER_TRAINING_RUN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/optimizer.h"
#include "worker/model/token_dataset.h"
#include "worker/parallel/final_checkpoint.h"

namespace dtrain {

struct TrainingRun {
  model::GptConfig model;
  model::OptimizerConfig optimizer;
  std::string data_path;
  std::string init_path;  // GPT-2 safetensors to start from; empty: InitializeGpt2(seed)
  uint64_t seed = 1337;
  int64_t steps = 10;            // total steps of the run (the LR schedule spans them)
  int batch = 8;                 // B: the whole batch, over every data-parallel replica
  int seq = 128;                 // T
  std::string resume_from;       // a job's checkpoint dir (its `latest`) or a step dir
  std::string checkpoint_dir;    // training state written here: the job's own directory
  int64_t checkpoint_every = 0;  // also every N steps; the final step is always saved
  // Retention (rank 0, after each seal; model::PruneSealedSteps): the newest keep_last sealed
  // steps, milestones (multiples of keep_every) and `latest`'s are kept. 0: keep every step.
  int keep_last = 0;
  int64_t keep_every = 0;
  // Checkpoints are written while training goes on; false: training waits for each (the
  // synchronous writes of earlier versions, for measurements).
  bool background_checkpoints = true;
  // The run's number within its job (JobAssignment.attempt: 0 its first run, N the run after
  // its N-th recovery): rank 0 claims checkpoint_dir with it (model/run_claim.h), so that a run
  // frozen past its recovery writes nothing when it wakes.
  int attempt = 0;
  std::string save_path;        // final weights as GPT-2 safetensors
  std::string dump_grads_path;  // gradients of the first step run, before clipping (one worker)
  // Validation (JobSpec.eval): the mean loss over batches 0 .. eval_batches-1 of eval_data_path
  // (B x T each) after every eval_every-th step and the last; eval_every 0: none.
  std::string eval_data_path;
  int64_t eval_every = 0;
  int eval_batches = 1;
  // Early stopping (JobSpec.eval.early_stopping; EarlyStopper below); patience 0: off.
  int early_stopping_patience = 0;
  double early_stopping_min_delta = 0;

  // Whether step `step` writes a checkpoint: with a checkpoint_dir, every checkpoint_every
  // steps and the last step.
  bool CheckpointsAt(int64_t step) const;
  // Whether step `step` is followed by an evaluation: every eval_every steps and the last step.
  bool EvaluatesAt(int64_t step) const;
};

// The validation data of `run` (eval_data_path), with at least one B x T batch; errors name
// eval.dataset ("eval.dataset /data/val.bin: ...").
absl::StatusOr<std::unique_ptr<model::TokenDataset>> OpenEvalData(const TrainingRun& run);

// The early-stopping rule, one place for every trainer and rank (all see the same val_loss).
// The best evaluation is the lowest val_loss so far (the earliest of equals, as the
// coordinator's Job.validation): its step's checkpoint is the one retention keeps. Patience
// counts the evaluations since the last one that improved on its predecessor of that kind by
// more than min_delta (the first evaluation is one); after `patience` in a row, stop.
class EarlyStopper {
 public:
  EarlyStopper(int patience, double min_delta) : patience_(patience), min_delta_(min_delta) {}
  // Records the evaluation after `step`; true when the run should stop after it.
  bool Observe(int64_t step, double val_loss);
  // Whether the last Observe set a new best (lowest) val_loss.
  bool improved() const { return improved_; }
  int64_t best_step() const { return best_step_; }  // 0: no evaluation yet
  double best_loss() const { return best_loss_; }

 private:
  int patience_;  // 0: never stops
  double min_delta_;
  int64_t best_step_ = 0;
  double best_loss_ = 0;
  bool improved_ = false;
  bool has_reference_ = false;
  double reference_loss_ = 0;  // the last evaluation that improved by more than min_delta
  int since_reference_ = 0;
};

struct TrainStepMetrics {
  int64_t step = 0;  // 1-based
  int64_t total_steps = 0;
  double loss = 0.0;
  double grad_norm = 0.0;  // before clipping
  float lr = 0.0f;
  double tokens_per_s = 0.0;
  double step_seconds = 0.0;
  // Where this worker's step time went (multi-worker runs; one worker: all compute). Compute:
  // kernels; communication: waiting on collectives and on sends/receives that had data to
  // move; bubble: pipeline idle time, waiting for a neighbour's activation or gradient.
  double compute_seconds = 0.0;
  double communication_seconds = 0.0;
  double bubble_seconds = 0.0;
  // After an evaluation (TrainingRun::EvaluatesAt): the validation loss with this step's weights.
  std::optional<double> val_loss;
  // The run stops after this step (early stopping): its checkpoint is written and its weights
  // are the final ones.
  bool stopped_early = false;
  // The best evaluation so far (0: none yet), for the job's end reason.
  int64_t best_val_step = 0;
  double best_val_loss = 0;
  // Some rank of the run was asked for a checkpoint (TrainingCallbacks::checkpoint_requested)
  // when this step began: every rank learns it from the step's own all-reduce, so all of them
  // checkpoint this step.
  bool checkpoint_requested = false;
};

// A checkpoint step this process finished writing.
struct CheckpointWritten {
  int64_t step = 0;
  std::string dir;      // the step directory, absolute
  bool sealed = false;  // this process sealed the step: it is complete and `latest` names it
  double seconds = 0;   // from handing it to the writer to done (written, and sealed if so)
  // What training stopped for: taking the snapshot, and waiting for the previous checkpoint
  // (at most one is in flight). With background writes the rest overlaps training.
  double blocked_seconds = 0;
  // The step was not written (one writer only: it would not fit on the disk, or the disk
  // filled while writing, and the partial step was removed); training goes on.
  bool skipped = false;
  std::string skip_reason;
};

// How a trainer reports; either may be empty. Called on the training thread.
struct TrainingCallbacks {
  // After every step (on every rank of a multi-worker job: all compute the same global
  // metrics). A non-OK status (e.g. Cancelled when the job was cancelled) stops the run after
  // that step's checkpoint, and the trainer returns it.
  std::function<absl::Status(const TrainStepMetrics&)> step;
  // After every checkpoint step this process finished writing (never for a step only
  // loaded), at the first step boundary after it finished (or at the end of the run): one
  // worker writes and seals it; each rank writes its shard and rank 0 seals it, so rank 0's
  // report (sealed) says the step is complete and `latest` names it.
  std::function<void(const CheckpointWritten&)> checkpoint;
  // A warning for the job's log, e.g. that resuming skipped a damaged checkpoint step.
  std::function<void(const std::string&)> warning;
  // A fact about how the run goes for the job's events, e.g. the path of the dp gradients.
  std::function<void(const std::string&)> note;
  // Before every step, when set: -1, or S: a checkpoint of a step after S is wanted as soon as
  // possible (the coordinator's HeartbeatResponse.checkpoint_requests: a preemption, a drain
  // or a rebalance waits for the next sealed checkpoint). A checkpoint already begun after S
  // answers it.
  std::function<int64_t()> checkpoint_requested;
  // Rank 0, when set: the last step's checkpoint (one worker: its weights file) waits for disk
  // space (parallel/final_checkpoint.h), and when that wait is over.
  std::function<void(const parallel::SpaceWait&)> space_wait;
};

// How RunTrainingSteps drives a trainer's checkpoints (worker/parallel/checkpoint_writer.h):
// `start` snapshots the state at a step boundary and hands it to the writer (training goes on
// while it is written); `finished` returns the steps done since the last call, with `wait`
// after the one in flight finished.
struct CheckpointHooks {
  // `keep`: the step is the best evaluation so far; retention keeps it (and only the newest
  // such step) whatever keep_last says.
  std::function<absl::Status(int64_t step, bool keep)> start;
  std::function<absl::StatusOr<std::vector<CheckpointWritten>>(bool wait)> finished;
};

// The step loop both trainers run: steps start_step+1 .. run.steps, each trained by
// `train_step` (told whether this rank was asked for a checkpoint no checkpoint has answered
// yet: callbacks.checkpoint_requested), evaluated by `evaluate` (forward only, may be empty
// without eval) when run.EvaluatesAt(step), and reported; checkpointed (checkpoints.start) when
// run.CheckpointsAt(step), when the evaluation is the best so far (so retention can keep the
// best step, model::PruneSealedSteps), when early stopping ends the run there and when the
// step's metrics say a checkpoint was asked for (checkpoint_requested); finished
// checkpoints reported at each step boundary and, waited for, at the end. A step callback's
// error is returned after that step's checkpoint finished.
absl::Status RunTrainingSteps(
    const TrainingRun& run, int64_t start_step, const TrainingCallbacks& callbacks,
    const std::function<absl::StatusOr<TrainStepMetrics>(int64_t step, bool checkpoint_asked)>&
        train_step,
    const std::function<absl::StatusOr<double>(int64_t step)>& evaluate,
    const CheckpointHooks& checkpoints);

}  // namespace dtrain

#endif  // DTRAIN_WORKER_TRAINING_RUN_H_
