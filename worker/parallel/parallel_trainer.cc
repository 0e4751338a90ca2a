#include "worker/parallel/parallel_trainer.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "plan/ranks.h"
#include "plan/spec_enums.h"
#include "worker/comm/collectives/all_gather.h"
#include "worker/comm/collectives/allreduce_ring.h"
#include "worker/comm/collectives/allreduce_shared.h"
#include "worker/comm/collectives/barrier.h"
#include "worker/comm/collectives/group.h"
#include "worker/comm/collectives/reduce_scatter.h"
#include "worker/comm/groups.h"
#include "worker/comm/p2p.h"
#include "worker/model/checkpoint.h"
#include "worker/model/init.h"
#include "worker/model/token_dataset.h"
#include "worker/parallel/checkpoint_writer.h"
#include "worker/parallel/device_staging.h"
#include "worker/parallel/gradient_sync.h"
#include "worker/parallel/parallel_trainer_parts.h"
#include "worker/parallel/sharded_checkpoint.h"
#include "worker/parallel/stage_executor.h"

namespace dtrain::parallel {
namespace {

// Group id of "every rank of the job" (groups.cc uses kinds 1-3 in the top byte).
constexpr int32_t kWorldGroupId = 4 << 24;
// The hierarchical dp all-reduce's groups: kind in the high bits (groups.cc has 1 to 3), the dp
// group's index below, so each dp group's are distinct from every other group's.
constexpr int32_t kDpHostGroupKind = 5 << 24, kDpLeadersGroupKind = 6 << 24;

// Layers of model chunk k when n_layer is cut evenly into K chunks (the first n_layer % K get
// one more).
ChunkRange EvenChunk(int n_layer, int K, int k) {
  const int base = n_layer / K, extra = n_layer % K;
  return {k * base + std::min(k, extra), base + (k < extra ? 1 : 0)};
}

// A float sum exact enough for losses and squared norms: each value travels as hi + lo floats.
absl::Status AllReducePrecise(comm::Group& group, std::vector<double>& values) {
  std::vector<float> parts;
  for (double v : values) {
    const float hi = static_cast<float>(v);
    parts.push_back(hi);
    parts.push_back(static_cast<float>(v - hi));
  }
  RETURN_IF_ERROR(comm::AllReduce(group, absl::MakeSpan(parts), comm::ReduceOp::kSum));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<double>(parts[2 * i]) + parts[2 * i + 1];
  }
  return absl::OkStatus();
}

}  // namespace

ParallelTrainer::~ParallelTrainer() = default;

// Gradients in buffers the dp group shares (comm/collectives/allreduce_shared.h): one buffer of
// every chunk's gradients, each chunk 64-byte aligned. A collective of the dp group, in the same
// place of every member's set-up. Where the backend's memory is host memory the chunks keep their
// gradients there; where it stages (CUDA), each bucket is copied into its place there, reduced in
// place and copied back. Where the members cannot share (not one host, no room in /dev/shm) the
// chunks keep their own memory and the buckets go through the ring.
absl::Status ParallelTrainer::ShareGradients(ParallelTrainer& t, kernels::Backend* backend,
                                             std::vector<SyncChunk>& chunks) {
  StepRunner& r = *t.runner_;
  constexpr int64_t kAlignFloats = 16;
  int64_t floats = 0;
  for (const SyncChunk& c : chunks)
    floats += (c.size + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  ASSIGN_OR_RETURN(r.dp_shared, comm::SharedAllReduce::Create(&*r.dp, floats));
  if (!r.dp_shared->shared()) {
    t.dp_shared_fell_back_ = true;
    t.dp_gradient_path_ = absl::StrCat("data-parallel gradient buckets go through the ring: ",
                                       r.dp_shared->why_not());
    return absl::OkStatus();
  }
  const bool in_place = backend->DeviceMemoryIsHostMemory();
  t.dp_gradient_path_ =
      in_place ? "data-parallel gradient buckets are all-reduced in place, in buffers the dp group "
                 "shares on this host"
               : "data-parallel gradient buckets are copied to buffers the dp group shares on "
                 "this host and all-reduced there";
  if (!in_place) {
    ASSIGN_OR_RETURN(r.dp_shared_pinned,
                     PinnedRegistration::Create(backend, r.dp_shared->buffer()));
  }
  int64_t at = 0;
  for (size_t j = 0; j < chunks.size(); ++j) {
    const absl::Span<float> storage = r.dp_shared->buffer().subspan(at, chunks[j].size);
    if (in_place) {
      RETURN_IF_ERROR(t.chunks_[j].stage->UseGradientStorage(storage));
      chunks[j].grads = storage.data();
    } else {
      chunks[j].host_mirror = storage.data();
    }
    at += (chunks[j].size + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  }
  return absl::OkStatus();
}

int ParallelTrainer::num_chunks() const { return static_cast<int>(chunks_.size()); }
model::GptStage& ParallelTrainer::chunk(int i) { return *chunks_[i].stage; }
model::AdamW& ParallelTrainer::optimizer(int i) { return *chunks_[i].optimizer; }

absl::StatusOr<std::unique_ptr<ParallelTrainer>> ParallelTrainer::Create(
    kernels::Backend* backend, comm::Transport* transport, ParallelTrainingOptions options) {
  // What the plan checked (layout, schedule, batch arithmetic, chunks) is trusted; what only
  // this process holds is checked.
  const TrainingRun& run = options.run;
  const RankPlan& planned = options.plan;
  const ParallelLayout& layout = planned.layout();
  const int dp = layout.dp(), pp = layout.pp(), tp = layout.tp();
  const int size = dp * pp * tp, rank = planned.rank();
  if (transport->size() != size || transport->rank() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("the transport has rank ", transport->rank(), " of ", transport->size(),
                     " but the trainer was given rank ", rank, " of dp=", dp, " pp=", pp,
                     " tp=", tp, " (", size, size == 1 ? " rank)" : " ranks)"));
  }
  std::vector<std::string> problems;
  const int B = run.batch, T = run.seq;
  if (!options.rank_hosts.empty() && static_cast<int>(options.rank_hosts.size()) != size) {
    problems.push_back(absl::StrCat(options.rank_hosts.size(), " rank hosts for ", size, " ranks"));
  }
  if (!run.save_path.empty() && run.checkpoint_dir.empty()) {
    problems.push_back(
        "save_path needs checkpoint_dir: the final weights are exported from "
        "the checkpoint's shards");
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
  const int v = layout.virtual_stages(), K = pp * v;
  // The checkpoint's step before anything else: a resume with nothing to train is refused on
  // every rank alike, before a shard is loaded or a file written.
  model::CheckpointStep checkpoint;
  if (!run.resume_from.empty()) {
    // The job's newest intact sealed step (an earlier one when the newest is damaged).
    ASSIGN_OR_RETURN(checkpoint, model::ResolveCheckpoint(run.resume_from, VerifySealedStep));
    RETURN_IF_ERROR(model::CheckStepsBeyond(run.steps, checkpoint));
  }

  std::unique_ptr<ParallelTrainer> t(new ParallelTrainer());
  t->backend_ = backend;
  t->transport_ = transport;
  t->options_ = options;
  t->runner_ = std::make_unique<StepRunner>();
  StepRunner& r = *t->runner_;
  r.coord = plan::RankCoordinates(layout, rank);
  r.micro_batch_rows = planned.micro_batch_size();
  r.schedule = {plan::ScheduleKindOf(planned.schedule()), pp, planned.micro_batches(), v};
  ASSIGN_OR_RETURN(r.actions, pipeline::StageActions(r.schedule, r.coord.pp_rank()));
  for (const pipeline::Action& a : r.actions) {
    if (a.type == pipeline::ActionType::kForward) r.forwards.push_back(a);
  }

  // Groups. Each is used by one thread: tp and world by the training thread, dp and tied by
  // the gradient sync thread (or, with ZeRO-1, dp by the training thread after the sync).
  comm::CollectiveOptions copts;
  copts.timeout = options.comm_timeout;
  ASSIGN_OR_RETURN(comm::GroupSpec tp_spec, comm::TensorParallelGroup(layout, rank));
  ASSIGN_OR_RETURN(comm::GroupSpec dp_spec, comm::DataParallelGroup(layout, rank));
  ASSIGN_OR_RETURN(std::optional<comm::GroupSpec> tied_spec,
                   comm::TiedEmbeddingGroup(layout, rank));
  comm::CollectiveOptions tp_opts = copts, dp_opts = copts;  // the test-only skip: one group
  (tp > 1 ? tp_opts : dp_opts).test_only_skip_seq = options.test_only.skip_collective_seq;
  ASSIGN_OR_RETURN(r.tp, comm::Group::Create(transport, tp_spec.ranks, tp_spec.id, tp_opts));
  ASSIGN_OR_RETURN(r.dp, comm::Group::Create(transport, dp_spec.ranks, dp_spec.id, dp_opts));
  std::vector<std::string> dp_hosts;
  for (int rank : dp_spec.ranks) {
    dp_hosts.push_back(options.rank_hosts.empty() ? std::string() : options.rank_hosts[rank]);
  }
  const int32_t dp_index = dp_spec.id & ((1 << 24) - 1);
  ASSIGN_OR_RETURN(
      r.dp_sum, comm::HierarchicalAllReduce::Create(&*r.dp, dp_hosts, kDpHostGroupKind | dp_index,
                                                    kDpLeadersGroupKind | dp_index));
  std::vector<int> all(size);
  for (int i = 0; i < size; ++i) all[i] = i;
  ASSIGN_OR_RETURN(r.world, comm::Group::Create(transport, all, kWorldGroupId, copts));
  if (pp > 1 && tied_spec.has_value()) {
    ASSIGN_OR_RETURN(r.tied,
                     comm::Group::Create(transport, tied_spec->ranks, tied_spec->id, copts));
  }
  ASSIGN_OR_RETURN(comm::PipelineNeighbours neighbours,
                   comm::PipelineNeighboursOf(layout, rank, v > 1));
  r.links = std::make_unique<comm::StageLinks>(transport, neighbours, options.comm_timeout);
  ASSIGN_OR_RETURN(r.staging, DeviceStaging::Create(
                                  backend, std::max<int64_t>(1, options.staging_chunk_bytes / 4)));

  // Chunks: virtual stage j holds model chunk j * pp + pp_rank.
  model::AllReduceSumFn tp_hook;
  if (tp > 1) {
    auto sum = comm::AllReduceSumFunction(&*r.tp);
    StepRunner* runner = &r;
    auto observe = options.on_collective;
    tp_hook = [sum, runner, observe](float* data, int64_t n) {
      const auto start = TrainerClock::now();
      absl::Status s = runner->staging->OnHost(data, n, /*chunked=*/true, [&](absl::Span<float> h) {
        return sum(h.data(), static_cast<int64_t>(h.size()));
      });
      const double seconds = SecondsSince(start);
      runner->tp_seconds += seconds;
      if (observe) observe("all_reduce", n * int64_t{sizeof(float)}, seconds);
      return s;
    };
  }
  std::vector<SyncChunk> sync_chunks;
  for (int j = 0; j < v; ++j) {
    const int k = j * pp + r.coord.pp_rank();
    const ChunkRange range = planned.chunks().empty() ? EvenChunk(run.model.n_layer, K, k)
                                                      : ChunkRange{planned.chunks(j).first_layer(),
                                                                   planned.chunks(j).num_layers()};
    const model::StageSpec spec{range.first_layer, range.num_layers, k == 0, k == K - 1};
    Chunk chunk;
    ASSIGN_OR_RETURN(chunk.stage, model::GptStage::Create(backend, run.model, spec,
                                                          {r.coord.tp_rank(), tp}, tp_hook));
    const int64_t total = chunk.stage->layout().total_size();
    const comm::Segment shard = layout.zero1()
                                    ? comm::RingSegment(total, r.dp->size(), r.dp->index())
                                    : comm::Segment{0, total};
    ASSIGN_OR_RETURN(model::AdamW opt,
                     model::AdamW::CreateForRange(backend, chunk.stage->layout(), run.optimizer,
                                                  shard.begin, shard.begin + shard.size));
    chunk.optimizer = std::make_unique<model::AdamW>(std::move(opt));
    SyncChunk sc{chunk.stage->grads(), total, std::nullopt};
    if (r.tied.has_value() && (spec.has_embedding || spec.has_head)) {
      const model::ParameterTensor* wte = chunk.stage->layout().Find("wte.weight");
      sc.tied_range = {{wte->offset, wte->offset + wte->local_size()}};
    }
    sync_chunks.push_back(sc);
    t->chunks_.push_back(std::move(chunk));
  }
  std::vector<model::GptStage*> stages;
  for (Chunk& c : t->chunks_) stages.push_back(c.stage.get());
  r.executor =
      std::make_unique<StageExecutor>(stages, pp, r.coord.pp_rank(), r.links.get(), r.staging.get(),
                                      r.micro_batch_rows, T, 1.0f / (float(B) * T));
  r.executor->set_execution(pipeline::ChooseExecution(r.schedule.kind, tp, options.execution));
  r.executor->set_gradient_release(options.gradient_release);
  r.executor->SetTestOnlyForwardDelay(options.test_only.forward_delay_step,
                                      options.test_only.forward_delay);
  const bool dp_buckets = dp > 1 && !layout.zero1();
  if (dp_buckets && !r.dp_sum->hierarchical()) {
    RETURN_IF_ERROR(ShareGradients(*t, backend, sync_chunks));
  }
  r.sync = std::make_unique<GradientSync>(
      std::move(sync_chunks), r.staging.get(), dp_buckets ? &*r.dp_sum : nullptr,
      r.dp_shared != nullptr && r.dp_shared->shared() ? r.dp_shared.get() : nullptr,
      r.tied.has_value() ? &*r.tied : nullptr, std::max<int64_t>(1, layout.bucket_bytes() / 4),
      [observe = options.on_collective](int64_t bytes, double seconds) {
        if (observe) observe("all_reduce", bytes, seconds);
      });

  // Data: the first stage needs tokens, the last stage targets.
  const bool needs_data = r.coord.pp_rank() == 0 || r.coord.pp_rank() == pp - 1;
  if (run.steps > 0 && needs_data) {
    ASSIGN_OR_RETURN(model::TokenDataset data,
                     model::TokenDataset::Open(run.data_path, run.model.vocab_size));
    RETURN_IF_ERROR(data.BatchesPerEpoch(B, T).status());
    r.data = std::make_unique<model::TokenDataset>(std::move(data));
    if (run.eval_every > 0) {
      ASSIGN_OR_RETURN(r.eval_data, OpenEvalData(run));
    }
  }

  // Initial state: a checkpoint of any layout, a GPT-2 file, or the seeded init (the same
  // values as one worker's, whatever the layout).
  std::vector<model::AdamW*> optimizers;
  for (Chunk& c : t->chunks_) optimizers.push_back(c.optimizer.get());
  if (!run.resume_from.empty()) {
    ASSIGN_OR_RETURN(t->start_step_,
                     LoadShard(checkpoint.step_dir, t->Identity(), stages, optimizers,
                               DataPositionAfter(0, run.batch, run.seq)));
    t->resumed_from_ = checkpoint.step_dir;
    t->resume_note_ = checkpoint.note;
    t->damaged_steps_ = checkpoint.damaged;
  } else {
    for (Chunk& c : t->chunks_) {
      if (!run.init_path.empty()) {
        RETURN_IF_ERROR(model::LoadWeights(run.init_path, *c.stage));
      } else {
        RETURN_IF_ERROR(model::InitializeGpt2(*c.stage, run.seed));
      }
    }
  }
  return t;
}

ShardIdentity ParallelTrainer::Identity() const {
  ShardIdentity id;
  id.dp_rank = runner_->coord.dp_rank();
  id.pp_rank = runner_->coord.pp_rank();
  id.tp_rank = runner_->coord.tp_rank();
  id.dp = options_.plan.layout().dp();
  id.pp = options_.plan.layout().pp();
  id.tp = options_.plan.layout().tp();
  id.virtual_stages = options_.plan.layout().virtual_stages();
  id.zero1 = options_.plan.layout().zero1();
  return id;
}

absl::Status ParallelTrainer::Timed(const char* op, int64_t floats,
                                    const std::function<absl::Status()>& collective) {
  const auto start = TrainerClock::now();
  absl::Status s = collective();
  if (s.ok() && options_.on_collective) {
    options_.on_collective(op, floats * int64_t{sizeof(float)}, SecondsSince(start));
  }
  return s;
}

absl::StatusOr<double> ParallelTrainer::OwnedSquaredNorm() {
  // Each gradient element is counted once over the job: tensors replicated over tp on tp rank 0
  // only; the tied head's wte copy not at all (the first stage counts wte); without ZeRO-1 on
  // dp rank 0 only (replicas hold the same reduced gradients), with it each rank its shard.
  const StepRunner& r = *runner_;
  if (!options_.plan.layout().zero1() && r.coord.dp_rank() != 0) return 0.0;
  double sq = 0;
  for (Chunk& c : chunks_) {
    const int64_t lo = c.optimizer->range_begin(), hi = c.optimizer->range_end();
    for (const model::ParameterTensor& t : c.stage->layout().tensors()) {
      if (t.shard == model::ShardKind::kReplicated && r.coord.tp_rank() != 0) continue;
      if (t.name == "wte.weight" && !c.stage->stage().has_embedding) continue;
      const int64_t begin = std::max(lo, t.offset);
      const int64_t end = std::min(hi, t.offset + t.local_size());
      if (begin >= end) continue;
      ASSIGN_OR_RETURN(double part, backend_->SquaredNorm(c.stage->grads() + begin, end - begin));
      sq += part;
    }
  }
  return sq;
}

absl::StatusOr<TrainStepMetrics> ParallelTrainer::TrainStep(int64_t step, bool checkpoint_asked) {
  StepRunner& r = *runner_;
  const TrainingRun& run = options_.run;
  const int B = run.batch, T = run.seq, b = r.micro_batch_rows;
  const auto start = TrainerClock::now();
  r.tp_seconds = 0;
  std::vector<int32_t> inputs, targets;
  if (r.data != nullptr) {
    inputs.resize(int64_t{B} * T);
    targets.resize(int64_t{B} * T);
    RETURN_IF_ERROR(
        r.data->GetBatch(step - 1, B, T, absl::MakeSpan(inputs), absl::MakeSpan(targets)));
  }
  // Replica d trains rows [d*B/dp, (d+1)*B/dp); micro-batch mb the b rows from d*B/dp + mb*b.
  const int64_t replica_row = int64_t{r.coord.dp_rank()} * (B / options_.plan.layout().dp());
  auto micro_batch = [&](int mb) -> MicroBatch {
    if (inputs.empty()) return {};
    const int64_t offset = (replica_row + int64_t{mb} * b) * T;
    return {absl::MakeConstSpan(inputs).subspan(offset, int64_t{b} * T),
            absl::MakeConstSpan(targets).subspan(offset, int64_t{b} * T)};
  };
  for (Chunk& c : chunks_) RETURN_IF_ERROR(c.stage->ZeroGrads());
  r.sync->StartStep();
  auto weights_final = [&](int j) -> model::GptStage::GradReadyFn {
    return [&r, j](int64_t begin, int64_t) {
      r.sync->MarkReady(j, begin);
      return absl::OkStatus();
    };
  };
  StepTimes times;
  RETURN_IF_ERROR(r.executor->RunStep(step, r.actions, micro_batch, weights_final, &times));
  last_trace_ = r.executor->trace();
  stats_.peak_live_activations = r.executor->peak_live();
  stats_.forward_seconds = times.forward;
  stats_.backward_input_seconds = times.backward_input;
  stats_.backward_weight_seconds = times.backward_weight;

  const auto comm_start = TrainerClock::now();
  RETURN_IF_ERROR(r.sync->Finish());
  stats_.dp_reduce_seconds = r.sync->reduce_seconds();
  stats_.dp_overlap_seconds = r.sync->overlap_seconds();
  stats_.reductions_started_in_backward = r.sync->queued_early();
  stats_.dp_hierarchical = r.dp_sum->hierarchical() && options_.plan.layout().dp() > 1 &&
                           !options_.plan.layout().zero1();
  stats_.dp_shared_buffers = r.dp_shared != nullptr && r.dp_shared->shared();
  if (options_.plan.layout().zero1() && options_.plan.layout().dp() > 1) {
    for (Chunk& c : chunks_) {
      const int64_t n = c.stage->layout().total_size();
      RETURN_IF_ERROR(Timed("reduce_scatter", n, [&] {
        return r.staging->OnHost(c.stage->grads(), n, /*chunked=*/false, [&](absl::Span<float> h) {
          return comm::ReduceScatter(*r.dp, h, comm::ReduceOp::kSum);
        });
      }));
    }
  }
  // Global loss and gradient norm, and whether any rank was asked for a checkpoint: one
  // all-reduce over the job.
  std::vector<double> sums(3, 0.0);
  sums[2] = checkpoint_asked ? 1.0 : 0.0;
  ASSIGN_OR_RETURN(sums[0], OwnedSquaredNorm());
  if (!r.executor->losses().empty() && r.coord.tp_rank() == 0) {
    for (double loss : r.executor->losses()) sums[1] += loss;
    sums[1] /= static_cast<double>(r.schedule.micro_batches) * options_.plan.layout().dp();
  }
  RETURN_IF_ERROR(Timed("all_reduce", 6, [&] { return AllReducePrecise(*r.world, sums); }));

  TrainStepMetrics metrics;
  metrics.step = step;
  metrics.checkpoint_requested = sums[2] > 0;
  metrics.total_steps = run.steps;
  metrics.loss = sums[1];
  metrics.grad_norm = std::sqrt(sums[0]);
  if (!std::isfinite(metrics.loss) || !std::isfinite(metrics.grad_norm)) {
    return absl::DataLossError(absl::StrCat("step ", step, ": loss ", metrics.loss, " grad norm ",
                                            metrics.grad_norm,
                                            " is not finite; stopping before the update"));
  }
  metrics.lr = model::LearningRate(run.optimizer, step - 1, run.steps);
  const float scale = model::ClipScale(metrics.grad_norm, run.optimizer.grad_clip);
  for (Chunk& c : chunks_) {
    RETURN_IF_ERROR(c.optimizer->Step(c.stage->params(), c.stage->grads(), metrics.lr, scale));
  }
  if (options_.plan.layout().zero1() && options_.plan.layout().dp() > 1) {
    for (Chunk& c : chunks_) {
      const int64_t n = c.stage->layout().total_size();
      RETURN_IF_ERROR(Timed("all_gather", n, [&] {
        return r.staging->OnHost(c.stage->params(), n, /*chunked=*/false,
                                 [&](absl::Span<float> h) { return comm::AllGather(*r.dp, h); });
      }));
    }
  }
  RETURN_IF_ERROR(backend_->Synchronize());
  const StagingStats staged = r.staging->stats();
  r.staging->ResetStats();
  stats_.staging_wait_seconds = staged.wait_seconds;
  stats_.staging_overlapped_seconds = staged.overlapped_seconds;
  stats_.staged_bytes = staged.bytes_to_host + staged.bytes_to_device;
  metrics.step_seconds = SecondsSince(start);
  metrics.tokens_per_s = static_cast<double>(B) * T / metrics.step_seconds;
  metrics.compute_seconds = std::max(0.0, times.compute - r.tp_seconds);
  metrics.bubble_seconds = times.wait;
  metrics.communication_seconds = r.tp_seconds + times.send + SecondsSince(comm_start);
  return metrics;
}

absl::StatusOr<double> ParallelTrainer::Evaluate(int64_t step) {
  StepRunner& r = *runner_;
  const TrainingRun& run = options_.run;
  const int B = run.batch, T = run.seq, b = r.micro_batch_rows;
  const int M = r.schedule.micro_batches;
  const int64_t replica_row = int64_t{r.coord.dp_rank()} * (B / options_.plan.layout().dp());
  std::vector<int32_t> inputs, targets;
  if (r.eval_data != nullptr) {
    inputs.resize(int64_t{B} * T);
    targets.resize(int64_t{B} * T);
  }
  double sum = 0;  // this rank's micro-batch losses (last stage, tp rank 0)
  StepTimes times;
  for (int k = 0; k < run.eval_batches; ++k) {
    if (r.eval_data != nullptr) {
      RETURN_IF_ERROR(
          r.eval_data->GetBatch(k, B, T, absl::MakeSpan(inputs), absl::MakeSpan(targets)));
    }
    // Validation batch k's micro-batches travel as numbers base.. base+M-1 of this step: apart
    // from the step's own 0..M-1 and from the other validation batches'.
    const int base = M * (k + 1);
    std::vector<pipeline::Action> forwards = r.forwards;
    for (pipeline::Action& a : forwards) a.micro_batch += base;
    auto micro_batch = [&](int mb) -> MicroBatch {
      if (inputs.empty()) return {};
      const int64_t offset = (replica_row + int64_t{mb - base} * b) * T;
      return {absl::MakeConstSpan(inputs).subspan(offset, int64_t{b} * T),
              absl::MakeConstSpan(targets).subspan(offset, int64_t{b} * T)};
    };
    RETURN_IF_ERROR(r.executor->RunForward(step, forwards, micro_batch, &times));
    if (r.coord.tp_rank() == 0) {
      for (double loss : r.executor->losses()) sum += loss;
    }
  }
  r.staging->ResetStats();
  std::vector<double> mean = {
      sum / (static_cast<double>(M) * options_.plan.layout().dp() * run.eval_batches)};
  RETURN_IF_ERROR(Timed("all_reduce", 2, [&] { return AllReducePrecise(*r.world, mean); }));
  return mean[0];
}

absl::Status ParallelTrainer::Run(const TrainingCallbacks& callbacks) {
  if (!resume_note_.empty() && callbacks.warning) callbacks.warning(resume_note_);
  // Shared buffers were possible but could not be had (a /dev/shm too small, or not shared):
  // the job runs, slower; dp member 0 says why, once.
  if (dp_shared_fell_back_ && runner_->dp->index() == 0 && callbacks.warning) {
    callbacks.warning(dp_gradient_path_);
  } else if (!dp_gradient_path_.empty() && runner_->dp->index() == 0 && callbacks.note) {
    callbacks.note(dp_gradient_path_);
  }
  absl::Status status = RunSteps(callbacks);
  if (!status.ok()) {
    // A checkpoint in flight cannot be sealed now: the other ranks stop too.
    if (writer_ != nullptr) writer_->Abandon(absl::ZeroDuration());
    // The other ranks may be waiting for this one: tell them at once rather than at their
    // deadlines (a rank that is cancelled, or whose peer vanished, ends the same way).
    comm::AbortJob(*transport_, status);
  }
  return status;
}

absl::Status ParallelTrainer::RunSteps(const TrainingCallbacks& callbacks) {
  const TrainingRun& run = options_.run;
  if (!run.checkpoint_dir.empty()) RETURN_IF_ERROR(StartWriter(callbacks));
  std::string saved;          // the last step directory written
  std::string final_skipped;  // why the last step's checkpoint was skipped ("": it was not)
  CheckpointHooks checkpoints;
  checkpoints.start = [this](int64_t step, bool keep) { return StartCheckpoint(step, keep); };
  checkpoints.finished = [&](bool wait) -> absl::StatusOr<std::vector<CheckpointWritten>> {
    if (writer_ == nullptr) return std::vector<CheckpointWritten>();
    std::optional<comm::FlightScope> recorded;  // waiting for the last seal
    if (wait) recorded.emplace(transport_->recorder(), comm::FlightRecord::Checkpoint(-1, "seal"));
    absl::StatusOr<std::vector<CheckpointWritten>> finished =
        wait ? writer_->Finish() : writer_->TakeFinished();
    if (recorded) recorded->Finish(finished.status());
    ASSIGN_OR_RETURN(std::vector<CheckpointWritten> done, std::move(finished));
    for (const CheckpointWritten& c : done) {
      if (!c.skipped) saved = c.dir;
      if (c.skipped && c.step == run.steps) final_skipped = c.skip_reason;
    }
    return done;
  };
  RETURN_IF_ERROR(RunTrainingSteps(
      run, start_step_, callbacks,
      [this](int64_t step, bool checkpoint_asked) { return TrainStep(step, checkpoint_asked); },
      [this](int64_t step) { return Evaluate(step); }, checkpoints));
  if (!run.save_path.empty() && writer_ != nullptr && transport_->size() > 1) {
    RETURN_IF_ERROR(AwaitFinalCheckpoint(callbacks, checkpoints, &final_skipped));
  }
  if (!run.save_path.empty()) {
    if (options_.plan.rank() == 0 && !final_skipped.empty()) {
      // The weights are exported from the last step's shards, which the disk could not hold.
      return absl::ResourceExhaustedError(absl::StrCat(
          "the checkpoint of step ", run.steps, ", the last, was skipped (", final_skipped,
          "): its weights cannot be exported; free space in ", run.checkpoint_dir,
          " and submit again with resume_from this job (its newest sealed step is kept)"));
    }
    // steps == 0 on a fresh start saves the initial state as step 0. A resume always trains
    // (Create refuses steps not beyond the checkpoint), so a loaded step is never written.
    if (saved.empty()) {
      RETURN_IF_ERROR(StartCheckpoint(start_step_, /*keep=*/false));
      ASSIGN_OR_RETURN(std::vector<CheckpointWritten> initial, checkpoints.finished(true));
      for (const CheckpointWritten& c : initial) {
        if (callbacks.checkpoint) callbacks.checkpoint(c);
      }
    }
    // Export the step this run wrote, not whatever `latest` says.
    if (options_.plan.rank() == 0) RETURN_IF_ERROR(ExportWeights(saved, callbacks));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::parallel
