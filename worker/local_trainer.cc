#include "worker/local_trainer.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/checkpoint.h"
#include "worker/model/init.h"
#include "worker/parallel/checkpoint_writer.h"
#include "worker/parallel/sharded_checkpoint.h"

namespace dtrain {

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(kernels::Backend* backend,
                                                                   const TrainingRun& options) {
  if (options.steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("steps=", options.steps, " must be >= 0"));
  }
  // B and T matter only when training or evaluating: `--steps=0 --save` just writes the initial
  // weights.
  const bool training = options.steps > 0;
  const bool evaluating = !options.eval_data_path.empty();
  if ((training || evaluating) &&
      (options.batch <= 0 || options.seq <= 0 || options.seq > options.model.context)) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch=", options.batch, " seq=", options.seq,
                     ": need batch > 0 and 0 < seq <= context=", options.model.context));
  }
  // The checkpoint's step before anything else: a resume with nothing to train is refused
  // before a tensor is loaded or a file written.
  model::CheckpointStep checkpoint;
  if (!options.resume_from.empty()) {
    // The job's newest intact sealed step (an earlier one when the newest is damaged).
    ASSIGN_OR_RETURN(checkpoint,
                     model::ResolveCheckpoint(options.resume_from, parallel::VerifySealedStep));
    RETURN_IF_ERROR(model::CheckStepsBeyond(options.steps, checkpoint));
  }
  std::unique_ptr<LocalTrainer> t(new LocalTrainer());
  t->backend_ = backend;
  t->options_ = options;
  ASSIGN_OR_RETURN(t->model_, model::GptStage::Create(backend, options.model,
                                                      {0, options.model.n_layer, true, true},
                                                      model::TensorParallelSpec{}));
  ASSIGN_OR_RETURN(model::AdamW opt,
                   model::AdamW::Create(backend, t->model_->layout(), options.optimizer));
  t->optimizer_ = std::make_unique<model::AdamW>(std::move(opt));
  if (training) {
    ASSIGN_OR_RETURN(model::TokenDataset data,
                     model::TokenDataset::Open(options.data_path, options.model.vocab_size));
    RETURN_IF_ERROR(data.BatchesPerEpoch(options.batch, options.seq).status());
    t->data_ = std::make_unique<model::TokenDataset>(std::move(data));
  }
  if (evaluating) {
    ASSIGN_OR_RETURN(t->eval_data_, OpenEvalData(options));
  }
  if (!options.resume_from.empty()) {
    // The same format as a parallel job's, with one shard per tensor: any layout's step loads.
    model::GptStage* stage = t->model_.get();
    model::AdamW* optimizer = t->optimizer_.get();
    ASSIGN_OR_RETURN(
        t->start_step_,
        parallel::LoadShard(checkpoint.step_dir, parallel::ShardIdentity{},
                            absl::MakeSpan(&stage, 1), absl::MakeSpan(&optimizer, 1),
                            parallel::DataPositionAfter(0, options.batch, options.seq)));
    t->resumed_from_ = checkpoint.step_dir;
    t->resume_note_ = checkpoint.note;
    t->damaged_steps_ = checkpoint.damaged;
  } else if (!options.init_path.empty()) {
    RETURN_IF_ERROR(model::LoadWeights(options.init_path, *t->model_));
  } else {
    RETURN_IF_ERROR(model::InitializeGpt2(*t->model_, options.seed));
  }
  if (training || evaluating) {
    ASSIGN_OR_RETURN(t->acts_, t->model_->NewActivations(options.batch, options.seq));
  }
  return t;
}

absl::StatusOr<TrainStepMetrics> LocalTrainer::TrainStep(int64_t step, bool checkpoint_asked) {
  const int B = options_.batch, T = options_.seq;
  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> inputs(int64_t{B} * T), targets(int64_t{B} * T);
  RETURN_IF_ERROR(data_->GetBatch(step - 1, B, T, absl::MakeSpan(inputs), absl::MakeSpan(targets)));
  model::GptStage& m = *model_;
  RETURN_IF_ERROR(m.ZeroGrads());
  RETURN_IF_ERROR(m.Forward(*acts_, {inputs, targets, nullptr}));
  RETURN_IF_ERROR(m.Backward(*acts_, nullptr, 1.0f / (B * T)));
  TrainStepMetrics metrics;
  metrics.checkpoint_requested = checkpoint_asked;
  metrics.step = step;
  metrics.total_steps = options_.steps;
  ASSIGN_OR_RETURN(metrics.loss, acts_->MeanLoss());
  ASSIGN_OR_RETURN(double sq, backend_->SquaredNorm(m.grads(), m.layout().total_size()));
  metrics.grad_norm = std::sqrt(sq);
  if (!std::isfinite(metrics.loss) || !std::isfinite(metrics.grad_norm)) {
    return absl::DataLossError(absl::StrCat("step ", step, ": loss ", metrics.loss, " grad norm ",
                                            metrics.grad_norm,
                                            " is not finite; stopping before the update"));
  }
  if (step == start_step_ + 1 && !options_.dump_grads_path.empty()) {
    RETURN_IF_ERROR(model::SaveTensors(options_.dump_grads_path, m, m.grads(),
                                       {{"step", absl::StrCat(step)}, {"kind", "gradients"}}));
  }
  metrics.lr = model::LearningRate(options_.optimizer, step - 1, options_.steps);
  const float scale = model::ClipScale(metrics.grad_norm, options_.optimizer.grad_clip);
  RETURN_IF_ERROR(optimizer_->Step(m.params(), m.grads(), metrics.lr, scale));
  RETURN_IF_ERROR(backend_->Synchronize());
  metrics.step_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics.tokens_per_s = B * T / metrics.step_seconds;
  return metrics;
}

absl::StatusOr<double> LocalTrainer::Evaluate() {
  if (eval_data_ == nullptr) {
    return absl::FailedPreconditionError("no validation data: the run has no eval_data_path");
  }
  const int B = options_.batch, T = options_.seq;
  std::vector<int32_t> inputs(int64_t{B} * T), targets(int64_t{B} * T);
  double sum = 0;
  for (int k = 0; k < options_.eval_batches; ++k) {
    RETURN_IF_ERROR(eval_data_->GetBatch(k, B, T, absl::MakeSpan(inputs), absl::MakeSpan(targets)));
    RETURN_IF_ERROR(model_->Forward(*acts_, {inputs, targets, nullptr}));
    ASSIGN_OR_RETURN(const double loss, acts_->MeanLoss());
    sum += loss;
  }
  return sum / options_.eval_batches;
}

absl::Status LocalTrainer::StartCheckpoint(int64_t step, bool keep) {
  const auto start = std::chrono::steady_clock::now();
  // A parallel job's checkpoint of the layout dp=pp=tp=1 (worker/parallel/sharded_checkpoint.h),
  // written by the same writer: the state as of this step boundary, in host memory.
  model::GptStage* stage = model_.get();
  model::AdamW* optimizer = optimizer_.get();
  ASSIGN_OR_RETURN(
      std::vector<parallel::PendingFile> files,
      parallel::SnapshotShard(step, parallel::ShardIdentity{}, absl::MakeSpan(&stage, 1),
                              absl::MakeSpan(&optimizer, 1)));
  return writer_->Submit(
      step, std::move(files),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), keep);
}

absl::Status LocalTrainer::Run(const TrainingCallbacks& callbacks) {
  if (!resume_note_.empty() && callbacks.warning) callbacks.warning(resume_note_);
  if (!options_.checkpoint_dir.empty()) {
    // Steps this run redoes past a damaged checkpoint are written again; what killed writers
    // left is removed.
    // The run claims the directory first: one frozen past its recovery touches nothing of it.
    const model::RunClaim claim{options_.attempt,
                                parallel::RunTokenText(parallel::NewRunTokenBits())};
    ASSIGN_OR_RETURN(const std::string removed,
                     parallel::PrepareJobDirectory(options_.checkpoint_dir, damaged_steps_, claim));
    if (!removed.empty() && callbacks.warning) callbacks.warning(removed);
    parallel::CheckpointWriterOptions w;
    w.dir = options_.checkpoint_dir;
    w.run_token = claim.token;
    w.run_attempt = claim.attempt;
    w.background = options_.background_checkpoints;
    w.keep_last = options_.keep_last;
    w.keep_every = options_.keep_every;
    w.seal = [run = options_](const model::HeldDirectory& dir, int64_t step,
                              std::vector<ShardFileEntry> entries) {
      return parallel::SealStep(dir, step, run.model, parallel::ShardIdentity{}.layout(),
                                parallel::DataPositionAfter(step, run.batch, run.seq),
                                std::move(entries));
    };
    writer_ = std::make_unique<parallel::CheckpointWriter>(std::move(w));
  }
  CheckpointHooks checkpoints;
  checkpoints.start = [this](int64_t step, bool keep) { return StartCheckpoint(step, keep); };
  checkpoints.finished = [this](bool wait) -> absl::StatusOr<std::vector<CheckpointWritten>> {
    if (writer_ == nullptr) return std::vector<CheckpointWritten>();
    return wait ? writer_->Finish() : writer_->TakeFinished();
  };
  RETURN_IF_ERROR(RunTrainingSteps(
      options_, start_step_, callbacks,
      [this](int64_t step, bool checkpoint_asked) { return TrainStep(step, checkpoint_asked); },
      [this](int64_t) { return Evaluate(); }, checkpoints));
  if (!options_.save_path.empty()) RETURN_IF_ERROR(SaveWeights(callbacks));
  return absl::OkStatus();
}

absl::Status LocalTrainer::SaveWeights(const TrainingCallbacks& callbacks) {
  // "" when written; why not when the disk is full; other errors end the run.
  auto save = [this]() -> absl::StatusOr<std::string> {
    const absl::Status saved = model::SaveTensors(options_.save_path, *model_, model_->params(),
                                                  {{"step", absl::StrCat(optimizer_->step())}});
    if (absl::IsResourceExhausted(saved)) return std::string(saved.message());
    RETURN_IF_ERROR(saved);
    return std::string();
  };
  parallel::FinalCheckpointHooks hooks;
  hooks.warning = callbacks.warning;
  hooks.note = callbacks.note;
  hooks.space_wait = callbacks.space_wait;
  return parallel::WriteWaitingForSpace(
      final_write_retry, std::move(hooks), options_.save_path,
      absl::StrCat("the weights file of step ", optimizer_->step(), " (", options_.save_path, ")"),
      save, [this] { return stop_ != nullptr && stop_->load(); });
}

}  // namespace dtrain
