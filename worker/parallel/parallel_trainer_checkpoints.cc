// ParallelTrainer's checkpoints: the background writer, a step's snapshot, the wait for the
// last step's checkpoint and the exported weights (the step itself: parallel_trainer.cc).
#include <csignal>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/comm/collectives/allreduce_ring.h"
#include "worker/parallel/checkpoint_export.h"
#include "worker/parallel/checkpoint_writer.h"
#include "worker/parallel/final_checkpoint.h"
#include "worker/parallel/parallel_trainer.h"
#include "worker/parallel/parallel_trainer_parts.h"
#include "worker/parallel/seal_watch.h"
#include "worker/parallel/sharded_checkpoint.h"

namespace dtrain::parallel {

absl::Status ParallelTrainer::StartWriter(const TrainingCallbacks& callbacks) {
  const TrainingRun& run = options_.run;
  // The run's token: rank 0 draws 48 random bits and the others add zeros, as three 16-bit
  // parts (exact in a float sum).
  std::vector<float> parts(3, 0.0f);
  if (options_.plan.rank() == 0) {
    const uint64_t bits = NewRunTokenBits();
    for (int i = 0; i < 3; ++i) parts[i] = static_cast<float>((bits >> (16 * i)) & 0xffff);
  }
  RETURN_IF_ERROR(Timed("all_reduce", 3, [&] {
    return comm::AllReduce(*runner_->world, absl::MakeSpan(parts), comm::ReduceOp::kSum);
  }));
  uint64_t token = 0;
  for (int i = 0; i < 3; ++i) token |= static_cast<uint64_t>(parts[i]) << (16 * i);
  // Every rank has resolved its checkpoint (Create) before the all-reduce returns, and none can
  // write a step before rank 0 trains it: the damaged steps it will redo go aside first.
  // What killed writers of an earlier run left is removed at the same point.
  // The run claims the directory first: one frozen past its recovery touches nothing of it.
  const model::RunClaim claim{run.attempt, RunTokenText(token)};
  if (options_.plan.rank() == 0) {
    ASSIGN_OR_RETURN(const std::string removed,
                     PrepareJobDirectory(run.checkpoint_dir, damaged_steps_, claim));
    if (!removed.empty() && callbacks.warning) callbacks.warning(removed);
  }
  CheckpointWriterOptions w;
  w.dir = run.checkpoint_dir;
  w.rank = options_.plan.rank();
  w.world_size = transport_->size();
  w.run_token = claim.token;
  w.run_attempt = claim.attempt;
  if (const int64_t stop_at = options_.test_only.stop_before_seal_step;
      stop_at > 0 && run.attempt == 0) {
    w.test_only_before_seal = [stop_at](int64_t step) {
      if (step == stop_at) raise(SIGSTOP);
    };
  }
  // A rank whose files take longer than any wait on a peer is as stuck as a silent peer.
  w.seal_timeout = options_.comm_timeout;
  if (options_.plan.rank() == 0) {
    std::vector<int> others;
    for (int r = 1; r < transport_->size(); ++r) others.push_back(r);
    w.peers_failed = [transport = transport_, others] {
      return comm::WatchPeers(*transport, others);
    };
    w.peer_left = [transport = transport_, others = std::move(others)] {
      return FirstPeerLeft(*transport, others);  // seal_watch.h
    };
  }
  w.background = run.background_checkpoints;
  w.keep_last = run.keep_last;
  w.keep_every = run.keep_every;
  w.seal = [config = run.model, layout = Identity().layout(), batch = run.batch, seq = run.seq](
               const model::HeldDirectory& dir, int64_t step, std::vector<ShardFileEntry> entries) {
    return SealStep(dir, step, config, layout, DataPositionAfter(step, batch, seq),
                    std::move(entries));
  };
  writer_ = std::make_unique<CheckpointWriter>(std::move(w));
  return absl::OkStatus();
}

absl::Status ParallelTrainer::StartCheckpoint(int64_t step, bool keep) {
  const auto start = TrainerClock::now();
  std::vector<model::GptStage*> stages;
  std::vector<model::AdamW*> optimizers;
  for (Chunk& c : chunks_) {
    stages.push_back(c.stage.get());
    optimizers.push_back(c.optimizer.get());
  }
  // The state as of this step boundary, in host memory; the writer takes it from here.
  comm::FlightScope recorded(transport_->recorder(),
                             comm::FlightRecord::Checkpoint(step, "snapshot"));
  absl::StatusOr<std::vector<PendingFile>> files =
      SnapshotShard(step, Identity(), stages, optimizers);
  if (!files.ok()) return recorded.Finish(files.status());
  return recorded.Finish(writer_->Submit(step, *std::move(files), SecondsSince(start), keep));
}

absl::Status ParallelTrainer::AwaitFinalCheckpoint(const TrainingCallbacks& callbacks,
                                                   const CheckpointHooks& checkpoints,
                                                   std::string* final_skipped) {
  const int64_t last = options_.run.steps;
  std::vector<int> others;
  for (int r = 0; r < transport_->size(); ++r) {
    if (r != options_.plan.rank()) others.push_back(r);
  }
  FinalCheckpointHooks hooks;
  hooks.agree = [this](float value) -> absl::StatusOr<float> {
    std::vector<float> sum = {value};
    RETURN_IF_ERROR(comm::AllReduce(*runner_->world, absl::MakeSpan(sum), comm::ReduceOp::kSum));
    return sum[0];
  };
  hooks.peers_ok = [this, &others] { return comm::WatchPeers(*transport_, others); };
  hooks.write_again = [&]() -> absl::StatusOr<std::string> {
    writer_->AllowRewriteOfLastStep();
    RETURN_IF_ERROR(StartCheckpoint(last, /*keep=*/false));
    final_skipped->clear();
    ASSIGN_OR_RETURN(std::vector<CheckpointWritten> done, checkpoints.finished(true));
    for (const CheckpointWritten& c : done) {
      // A skip again is this wait's business (its log lines), not one more skipped step.
      if (!c.skipped && callbacks.checkpoint) callbacks.checkpoint(c);
    }
    return *final_skipped;
  };
  hooks.warning = callbacks.warning;
  hooks.note = callbacks.note;
  hooks.space_wait = callbacks.space_wait;
  std::optional<comm::FlightScope> waiting;
  hooks.waiting = [&](bool on) {
    if (on) {
      waiting.emplace(transport_->recorder(),
                      comm::FlightRecord::Checkpoint(last, "waiting for disk space"));
    } else if (waiting.has_value()) {
      waiting->Finish(absl::OkStatus());
      waiting.reset();
    }
  };
  std::string rank0_skipped = options_.plan.rank() == 0 ? *final_skipped : "";
  RETURN_IF_ERROR(parallel::AwaitFinalCheckpoint(
      options_.final_checkpoint_retry, hooks, options_.plan.rank() == 0,
      absl::StrCat("the checkpoint of step ", last, ", the last,"), options_.run.checkpoint_dir,
      &rank0_skipped));
  if (options_.plan.rank() == 0) *final_skipped = rank0_skipped;
  return absl::OkStatus();
}

absl::Status ParallelTrainer::ExportWeights(const std::string& step_dir,
                                            const TrainingCallbacks& callbacks) {
  const std::string& out = options_.run.save_path;
  // "" when written; why not when the disk is full; other errors end the run.
  auto export_once = [&]() -> absl::StatusOr<std::string> {
    const absl::Status exported = ExportSafetensors(step_dir, out).status();
    if (absl::IsResourceExhausted(exported)) return std::string(exported.message());
    RETURN_IF_ERROR(exported);
    return std::string();
  };
  FinalCheckpointHooks hooks;
  hooks.warning = callbacks.warning;
  hooks.note = callbacks.note;
  hooks.space_wait = callbacks.space_wait;
  const std::atomic<bool>* stop = options_.stop;
  return WriteWaitingForSpace(
      options_.final_checkpoint_retry, std::move(hooks), out,
      absl::StrCat("the weights file of step ", options_.run.steps, " (", out, ")"), export_once,
      [stop] { return stop != nullptr && stop->load(); });
}

}  // namespace dtrain::parallel
