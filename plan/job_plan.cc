#include "plan/job_plan.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "plan/memory.h"
#include "plan/ranks.h"
#include "plan/spec_enums.h"
#include "plan/spec_json.h"
#include "plan/stage_cuts.h"

namespace dtrain::plan {
namespace {

using pipeline::ActionType;

constexpr int64_t kDefaultBucketBytes = 25 << 20;
constexpr uint64_t kDefaultSeed = 1337;

using Problems = std::vector<std::string>;

constexpr int kDefaultMaxRestarts = 3;
constexpr char kDefaultWaitFor[] = "60s";
constexpr int kMaxRestarts = 1000;
constexpr int kMaxPriority = 100;  // JobSpec.priority: -100..100
constexpr double kDefaultStragglerThreshold = 1.5;
constexpr double kMaxStragglerThreshold = 100;
constexpr int kDefaultStragglerWindow = 20;
constexpr int kMaxStragglerWindow = 10000;

// How many plans PlanChecked made (PlansMadeForTesting).
std::atomic<int64_t> plans_made{0};

// `name`=value must be in [1, cap] (0 allowed when `zero_ok`: a default follows).
void CheckRange(absl::string_view name, int64_t value, int64_t cap, bool zero_ok,
                Problems* problems) {
  if (zero_ok ? value < 0 : value <= 0) {
    problems->push_back(
        absl::StrCat(name, "=", value, zero_ok ? " must be >= 0" : " must be positive"));
  } else if (value > cap) {
    problems->push_back(absl::StrCat(name, "=", value, " exceeds ", cap));
  }
}

void CheckModel(const JobSpec& spec, Problems* problems) {
  if (!spec.has_model()) {
    problems->push_back("model is required (vocab_size, context, n_layer, n_head, n_embd)");
    return;
  }
  const ModelConfig& m = spec.model();
  CheckRange("model.vocab_size", m.vocab_size(), kMaxVocabSize, false, problems);
  CheckRange("model.context", m.context(), kMaxContext, false, problems);
  CheckRange("model.n_layer", m.n_layer(), kMaxLayers, false, problems);
  CheckRange("model.n_head", m.n_head(), kMaxEmbd, false, problems);
  CheckRange("model.n_embd", m.n_embd(), kMaxEmbd, false, problems);
  if (m.n_head() > 0 && m.n_embd() > 0 && m.n_embd() % m.n_head() != 0) {
    problems->push_back(
        absl::StrCat("model.n_head=", m.n_head(), " does not divide n_embd=", m.n_embd()));
  }
}

// Fills every unset optional optimizer field with OptimizerConfig's default.
void DefaultOptimizer(OptimizerConfig* o) {
  if (!o->has_max_lr()) o->set_max_lr(6e-4f);
  if (!o->has_min_lr_ratio()) o->set_min_lr_ratio(0.1f);
  if (!o->has_weight_decay()) o->set_weight_decay(0.1f);
  if (!o->has_beta1()) o->set_beta1(0.9f);
  if (!o->has_beta2()) o->set_beta2(0.95f);
  if (!o->has_eps()) o->set_eps(1e-8f);
  if (!o->has_grad_clip()) o->set_grad_clip(1.0f);
}

void CheckOptimizer(const OptimizerConfig& o, Problems* problems) {
  auto add = [&](absl::string_view field, auto value, absl::string_view rule) {
    problems->push_back(absl::StrCat("optimizer.", field, "=", value, " ", rule));
  };
  // Every comparison is written so that NaN fails it; Infinity fails the caps.
  if (!(o.lr() >= 0)) add("lr", o.lr(), "must be >= 0");
  if (o.lr() > kMaxLearningRate) {
    add("lr", o.lr(), absl::StrCat("exceeds ", kMaxLearningRate, " (training diverges at once)"));
  }
  if (o.lr() == 0 && !(o.max_lr() > 0)) add("max_lr", o.max_lr(), "must be positive");
  if (o.lr() == 0 && o.max_lr() > kMaxLearningRate) {
    add("max_lr", o.max_lr(),
        absl::StrCat("exceeds ", kMaxLearningRate, " (training diverges at once)"));
  }
  if (!(o.min_lr_ratio() >= 0 && o.min_lr_ratio() <= 1)) {
    add("min_lr_ratio", o.min_lr_ratio(), "must be in [0, 1]");
  }
  if (o.warmup_steps() < 0) add("warmup_steps", o.warmup_steps(), "must be >= 0");
  if (!(o.weight_decay() >= 0 && std::isfinite(o.weight_decay()))) {
    add("weight_decay", o.weight_decay(), "must be finite and >= 0");
  }
  // AdamW scales every weight by (1 - rate * weight_decay) each step: past 1 it flips and grows.
  const double peak = o.lr() > 0 ? o.lr() : o.max_lr();
  if (peak > 0 && peak <= kMaxLearningRate && o.weight_decay() * peak > 1) {
    add("weight_decay", o.weight_decay(),
        absl::StrCat("times the learning rate ", peak,
                     " exceeds 1 (each step would scale the weights by 1 - ",
                     o.weight_decay() * peak, ")"));
  }
  if (!(o.beta1() >= 0 && o.beta1() < 1)) add("beta1", o.beta1(), "must be in [0, 1)");
  if (!(o.beta2() >= 0 && o.beta2() < 1)) add("beta2", o.beta2(), "must be in [0, 1)");
  if (!(o.eps() > 0 && std::isfinite(o.eps()))) add("eps", o.eps(), "must be finite and positive");
  if (!(o.grad_clip() >= 0)) add("grad_clip", o.grad_clip(), "must be >= 0 (0 disables clipping)");
}

// The rules and defaults of a spec, every problem appended; returns the micro-batches per
// replica (0 when the batch rules failed).
void CheckFaultTolerance(FaultTolerance* f, Problems* problems) {
  if (!f->has_max_restarts()) f->set_max_restarts(kDefaultMaxRestarts);
  if (f->max_restarts() < 0 || f->max_restarts() > kMaxRestarts) {
    problems->push_back(absl::StrCat("fault_tolerance.max_restarts=", f->max_restarts(),
                                     " must be in [0, ", kMaxRestarts, "]"));
  }
  if (f->on_worker_loss().empty()) f->set_on_worker_loss("shrink");
  if (!ParseWorkerLossPolicy(f->on_worker_loss()).has_value()) {
    problems->push_back(absl::StrCat("fault_tolerance.on_worker_loss=\"", f->on_worker_loss(),
                                     "\" is not one of wait, shrink"));
  }
  if (f->wait_for().empty()) f->set_wait_for(kDefaultWaitFor);
  absl::Duration wait;
  if (!absl::ParseDuration(f->wait_for(), &wait) || wait < absl::ZeroDuration() ||
      wait > absl::Hours(24 * 7)) {
    problems->push_back(absl::StrCat("fault_tolerance.wait_for=\"", f->wait_for(),
                                     "\" is not a duration between 0s and 168h (e.g. \"60s\")"));
  }
}

// stragglers.*: threshold > 1 (a rank at its peers' pace scores 1), a window of at least 2
// steps, a known policy.
void CheckStragglers(StragglerSpec* s, Problems* problems) {
  if (s->threshold() == 0) s->set_threshold(kDefaultStragglerThreshold);
  if (!(s->threshold() > 1 && s->threshold() <= kMaxStragglerThreshold)) {
    problems->push_back(absl::StrCat("stragglers.threshold=", s->threshold(), " must be in (1, ",
                                     kMaxStragglerThreshold,
                                     "] (a rank at its peers' pace scores 1)"));
  }
  if (s->window_steps() == 0) s->set_window_steps(kDefaultStragglerWindow);
  CheckRange("stragglers.window_steps", s->window_steps(), kMaxStragglerWindow, false, problems);
  if (s->window_steps() == 1) {
    problems->push_back("stragglers.window_steps=1 must be at least 2 (one slow step is noise)");
  }
  if (s->policy().empty()) s->set_policy("report");
  if (!ParseStragglerPolicy(s->policy()).has_value()) {
    problems->push_back(absl::StrCat("stragglers.policy=\"", s->policy(),
                                     "\" is not one of report, replace, rebalance"));
  }
}

// matmul_precision: "" -> "fp32"; tf32 and bf16 only on CUDA (the CPU backend computes in fp32):
// refused with device "cpu", and device "auto" becomes "cuda" (placed on CUDA workers only).
void CheckMatmulPrecision(JobSpec& spec, Problems* problems) {
  if (spec.matmul_precision().empty()) spec.set_matmul_precision("fp32");
  const std::optional<MatmulPrecision> precision = ParseMatmulPrecision(spec.matmul_precision());
  if (!precision.has_value()) {
    problems->push_back(absl::StrCat("matmul_precision=\"", spec.matmul_precision(),
                                     "\" is not one of fp32, tf32, bf16"));
    return;
  }
  if (*precision == MATMUL_FP32) return;
  if (spec.device() == "cpu") {
    problems->push_back(absl::StrCat(
        "matmul_precision=\"", spec.matmul_precision(),
        "\" needs device \"cuda\" (tensor cores); the CPU computes in fp32: use device "
        "\"cuda\" or matmul_precision \"fp32\""));
  } else if (spec.device() == "auto") {
    spec.set_device("cuda");
  }
}

// eval.*, when the section is given: a dataset other than the training one, every_steps in
// [1, steps], batches 0 -> 1 (at most kMaxEvalBatches), early_stopping's patience >= 1 and
// min_delta >= 0.
void CheckEval(JobSpec& spec, Problems* problems) {
  if (!spec.has_eval()) return;
  EvalSpec& e = *spec.mutable_eval();
  if (e.dataset().empty()) {
    problems->push_back("eval.dataset is required: the validation data (an llm.c .bin or text)");
  } else if (e.dataset() == spec.dataset()) {
    problems->push_back(absl::StrCat("eval.dataset=\"", e.dataset(),
                                     "\" is the training dataset: validation needs held-out data"));
  }
  if (e.every_steps() <= 0) {
    problems->push_back(absl::StrCat("eval.every_steps=", e.every_steps(), " must be positive"));
  } else if (spec.steps() > 0 && e.every_steps() > spec.steps()) {
    problems->push_back(absl::StrCat("eval.every_steps=", e.every_steps(), " exceeds steps=",
                                     spec.steps(), ": the job would never evaluate"));
  }
  if (e.batches() == 0) e.set_batches(1);
  CheckRange("eval.batches", e.batches(), kMaxEvalBatches, false, problems);
  if (e.has_early_stopping()) {
    const EarlyStopping& stop = e.early_stopping();
    CheckRange("eval.early_stopping.patience", stop.patience(), kMaxSteps, false, problems);
    if (!(stop.min_delta() >= 0) || !std::isfinite(stop.min_delta())) {
      problems->push_back(absl::StrCat("eval.early_stopping.min_delta=", stop.min_delta(),
                                       " must be a finite number >= 0"));
    }
  }
}

// parallel.stage_layers, when given: one entry per stage, each >= 1, summing to n_layer
// (`sizes_known`: pp and n_layer passed their own checks), and not with "interleaved".
void CheckStageLayers(const ParallelLayout& p, int n_layer, bool sizes_known, Problems* problems) {
  if (p.stage_layers().empty()) return;
  const std::string given =
      absl::StrCat("parallel.stage_layers=[", absl::StrJoin(p.stage_layers(), ", "), "]");
  if (ParseSchedule(p.schedule()) == SCHEDULE_INTERLEAVED) {
    problems->push_back(absl::StrCat(
        given, " cannot be used with schedule \"interleaved\" (its chunks are cut by the plan)"));
    return;
  }
  if (!sizes_known) return;
  if (p.stage_layers_size() != p.pp()) {
    problems->push_back(absl::StrCat(given, " has ", p.stage_layers_size(),
                                     " entries, parallel.pp=", p.pp(), " stages"));
    return;
  }
  int64_t sum = 0;
  for (int32_t layers : p.stage_layers()) {
    if (layers < 1) {
      problems->push_back(absl::StrCat(given, ": every stage needs at least one layer"));
      return;
    }
    sum += layers;
  }
  if (sum != n_layer) {
    problems->push_back(absl::StrCat(given, " sums to ", sum, " layers, model.n_layer=", n_layer));
  }
}

int64_t CheckAndDefault(JobSpec& spec, Problems* problems) {
  CheckModel(spec, problems);
  const bool model_ok = problems->empty();
  const ModelConfig& m = spec.model();

  DefaultOptimizer(spec.mutable_optimizer());
  CheckOptimizer(spec.optimizer(), problems);

  // --- data and steps ---
  if (spec.dataset().empty()) problems->push_back("dataset is required (a path on the workers)");
  if (!spec.resume_from().empty() && !spec.init_checkpoint().empty()) {
    problems->push_back(
        "resume_from and init_checkpoint exclude each other: a resumed run takes its weights "
        "from the checkpoint it continues");
  }
  CheckRange("steps", spec.steps(), kMaxSteps, false, problems);
  CheckRange("batch_size", spec.batch_size(), kMaxBatchSize, false, problems);
  CheckRange("micro_batch_size", spec.micro_batch_size(), kMaxBatchSize, true, problems);
  CheckRange("seq_len", spec.seq_len(), kMaxContext, true, problems);
  if (spec.seq_len() == 0) spec.set_seq_len(m.context());
  if (m.context() > 0 && spec.seq_len() > m.context()) {
    problems->push_back(
        absl::StrCat("seq_len=", spec.seq_len(), " exceeds model.context=", m.context()));
  }

  // --- parallel layout ---
  ParallelLayout* p = spec.mutable_parallel();
  CheckRange("parallel.dp", p->dp(), kMaxWorkersPerJob, true, problems);
  CheckRange("parallel.pp", p->pp(), kMaxWorkersPerJob, true, problems);
  CheckRange("parallel.tp", p->tp(), kMaxWorkersPerJob, true, problems);
  CheckRange("parallel.virtual_stages", p->virtual_stages(), kMaxLayers, true, problems);
  if (p->bucket_bytes() < 0) {
    problems->push_back(absl::StrCat("parallel.bucket_bytes=", p->bucket_bytes(), " must be >= 0"));
  }
  if (p->dp() == 0) p->set_dp(1);
  if (p->pp() == 0) p->set_pp(1);
  if (p->tp() == 0) p->set_tp(1);
  if (p->virtual_stages() == 0) p->set_virtual_stages(1);
  if (p->bucket_bytes() == 0) p->set_bucket_bytes(kDefaultBucketBytes);
  if (p->schedule().empty()) p->set_schedule("1f1b");
  const bool layout_ok = p->dp() > 0 && p->pp() > 0 && p->tp() > 0 && p->virtual_stages() > 0 &&
                         p->dp() <= kMaxWorkersPerJob && p->pp() <= kMaxWorkersPerJob &&
                         p->tp() <= kMaxWorkersPerJob && p->virtual_stages() <= kMaxLayers;

  int64_t micro_batches = 0;
  if (layout_ok && spec.batch_size() > 0 && spec.batch_size() <= kMaxBatchSize &&
      spec.micro_batch_size() >= 0) {
    if (spec.batch_size() % p->dp() != 0) {
      problems->push_back(absl::StrCat("batch_size=", spec.batch_size(),
                                       " is not divisible by parallel.dp=", p->dp()));
    } else {
      const int per_replica = spec.batch_size() / p->dp();
      if (spec.micro_batch_size() == 0) spec.set_micro_batch_size(per_replica);
      if (per_replica % spec.micro_batch_size() != 0) {
        problems->push_back(absl::StrCat(
            "micro_batch_size=", spec.micro_batch_size(),
            " does not divide the per-replica batch batch_size/parallel.dp=", per_replica));
      } else {
        micro_batches = per_replica / spec.micro_batch_size();
        if (micro_batches > kMaxMicroBatches) {
          problems->push_back(absl::StrCat(
              "micro_batch_size=", spec.micro_batch_size(), " makes ", micro_batches,
              " micro-batches per replica per step (batch_size/parallel.dp/micro_batch_size); "
              "at most ",
              kMaxMicroBatches));
          micro_batches = 0;
        }
      }
    }
  }
  if (spec.micro_batch_size() > 0 && spec.seq_len() > 0 &&
      int64_t{spec.micro_batch_size()} * spec.seq_len() > kMaxMicroBatchTokens) {
    problems->push_back(absl::StrCat("micro_batch_size*seq_len=", spec.micro_batch_size(), "*",
                                     spec.seq_len(), " exceeds ", kMaxMicroBatchTokens,
                                     " tokens per micro-batch"));
  }
  if (p->tp() > 0 && m.n_head() > 0 && m.n_head() % p->tp() != 0) {
    problems->push_back(
        absl::StrCat("parallel.tp=", p->tp(), " does not divide model.n_head=", m.n_head()));
  }
  if (m.n_layer() > 0 && p->pp() > m.n_layer()) {
    problems->push_back(absl::StrCat("parallel.pp=", p->pp(), " exceeds model.n_layer=",
                                     m.n_layer(), " (every stage needs a layer)"));
  }
  const std::optional<PipelineSchedule> schedule = ParseSchedule(p->schedule());
  if (!schedule.has_value()) {
    problems->push_back(absl::StrCat("parallel.schedule=\"", p->schedule(),
                                     "\" is not one of gpipe, 1f1b, interleaved, zb-h1"));
  } else if (*schedule == SCHEDULE_INTERLEAVED) {
    const size_t before = problems->size();
    if (p->virtual_stages() < 2) {
      problems->push_back(absl::StrCat("parallel.virtual_stages=", p->virtual_stages(),
                                       " must be >= 2 for schedule \"interleaved\""));
    }
    if (p->pp() < 2) {
      problems->push_back(
          absl::StrCat("parallel.pp=", p->pp(), " must be >= 2 for schedule \"interleaved\""));
    }
    if (m.n_layer() > 0 && p->pp() > 0 && p->virtual_stages() > 0 &&
        int64_t{p->pp()} * p->virtual_stages() > m.n_layer()) {
      problems->push_back(absl::StrCat("parallel.pp*virtual_stages=", p->pp(), "*",
                                       p->virtual_stages(), " exceeds model.n_layer=", m.n_layer(),
                                       " (every chunk needs a layer)"));
    }
    // The schedule's own rule (plan/schedule.h), in its words, with the fields.
    if (problems->size() == before && micro_batches > 0 && layout_ok) {
      const absl::Status valid =
          pipeline::ValidateSchedule({pipeline::ScheduleKind::kInterleaved, p->pp(),
                                      static_cast<int>(micro_batches), p->virtual_stages()});
      if (!valid.ok()) {
        absl::string_view rule = valid.message();
        absl::ConsumePrefix(&rule, "invalid interleaved schedule: ");
        problems->push_back(absl::StrCat(
            "parallel.schedule=\"interleaved\": ", rule,
            " (micro_batches = batch_size/parallel.dp/micro_batch_size = ", spec.batch_size(), "/",
            p->dp(), "/", spec.micro_batch_size(), ", stages = parallel.pp)"));
      }
    }
  } else if (p->virtual_stages() > 1) {
    problems->push_back(absl::StrCat("parallel.virtual_stages=", p->virtual_stages(),
                                     " needs schedule \"interleaved\", not \"", p->schedule(),
                                     "\""));
  }
  CheckStageLayers(*p, m.n_layer(), layout_ok && model_ok, problems);
  const int64_t workers = layout_ok ? WorkersNeeded(*p) : 0;
  if (workers > kMaxWorkersPerJob) {
    problems->push_back(absl::StrCat("parallel.dp*pp*tp=", p->dp(), "*", p->pp(), "*", p->tp(), "=",
                                     workers, " exceeds ", kMaxWorkersPerJob, " workers"));
  }
  if (layout_ok && micro_batches > 0 &&
      micro_batches * p->pp() * p->virtual_stages() > kMaxScheduleForwards) {
    problems->push_back(
        absl::StrCat("micro-batches*parallel.pp*parallel.virtual_stages=", micro_batches, "*",
                     p->pp(), "*", p->virtual_stages(), " exceeds ", kMaxScheduleForwards,
                     " forwards per step: use a larger micro_batch_size"));
  }

  // --- device, checkpoints, seed, priority ---
  if (spec.priority() < -kMaxPriority || spec.priority() > kMaxPriority) {
    problems->push_back(absl::StrCat("priority=", spec.priority(), " must be in [-", kMaxPriority,
                                     ", ", kMaxPriority, "]"));
  }
  if (spec.device().empty()) spec.set_device("auto");
  if (!ParseDevice(spec.device()).has_value()) {
    problems->push_back(
        absl::StrCat("device=\"", spec.device(), "\" is not one of cpu, cuda, auto"));
  }
  CheckMatmulPrecision(spec, problems);
  PlanCheckpoint(workers, spec.mutable_checkpoint(), problems);
  if (spec.seed() == 0) spec.set_seed(kDefaultSeed);
  CheckFaultTolerance(spec.mutable_fault_tolerance(), problems);
  CheckStragglers(spec.mutable_stragglers(), problems);
  CheckEval(spec, problems);
  return model_ok ? micro_batches : 0;
}

// Stage cuts: pp * v chunks; chunk j of stage s is model chunk j * pp + s. The spec's
// parallel.stage_layers when given (checked: v = 1), else balanced by the cost model.
absl::Status CutStages(JobPlan& plan) {
  const JobSpec& spec = plan.spec();
  const int pp = spec.parallel().pp(), v = spec.parallel().virtual_stages();
  const StageCostModel cost = CostModelFor(spec.model(), spec.seq_len());
  LayerPartition partition;
  if (spec.parallel().stage_layers().empty()) {
    ASSIGN_OR_RETURN(partition, PartitionLayers(spec.model().n_layer(), pp * v, cost));
  } else {
    const std::vector<int> layers(spec.parallel().stage_layers().begin(),
                                  spec.parallel().stage_layers().end());
    partition = CutOf(layers, cost);
  }
  std::vector<int> first(pp * v, 0);
  for (int k = 1; k < pp * v; ++k) first[k] = first[k - 1] + partition.num_layers[k - 1];
  for (int s = 0; s < pp; ++s) {
    StagePlan* stage = plan.add_stages();
    stage->set_stage(s);
    double cost = 0;
    for (int j = 0; j < v; ++j) {
      LayerRange* range = stage->add_chunks();
      range->set_first_layer(first[j * pp + s]);
      range->set_num_layers(partition.num_layers[j * pp + s]);
      cost += partition.costs[j * pp + s];
    }
    stage->set_cost(cost);
  }
  return absl::OkStatus();
}

// Most micro-batches alive at once in each chunk of a simulated stage: from F to the end of
// its backward (W for zb-h1), as the executor keeps their activations.
std::vector<int> PeakLivePerChunk(const pipeline::StageResult& stage, int v) {
  std::vector<int> live(v, 0), peak(v, 0);
  for (const pipeline::TimedAction& t : stage.timeline) {
    const int c = t.action.chunk;
    if (t.action.type == ActionType::kForward) peak[c] = std::max(peak[c], ++live[c]);
    if (t.action.type == ActionType::kBackward || t.action.type == ActionType::kBackwardWeight) {
      --live[c];
    }
  }
  return peak;
}

}  // namespace

absl::Duration RecoveryWaitFor(const JobSpec& planned) {
  absl::Duration wait;
  if (!absl::ParseDuration(planned.fault_tolerance().wait_for(), &wait)) {
    absl::ParseDuration(kDefaultWaitFor, &wait);
  }
  return wait;
}

absl::StatusOr<JobPlan> ShrinkPlan(const JobSpec& planned, int64_t workers) {
  const ParallelLayout& p = planned.parallel();
  const int64_t per_replica = int64_t{p.pp()} * p.tp();
  std::vector<std::string> tried;
  // Fewer replicas first: the same stages and shards, the same numbers.
  for (int dp = p.dp() - 1; dp >= 1; --dp) {
    if (dp * per_replica > workers) continue;
    JobSpec smaller = planned;
    smaller.mutable_parallel()->set_dp(dp);
    absl::StatusOr<JobPlan> plan = MakeJobPlan(smaller);
    if (plan.ok()) return plan;
    tried.push_back(absl::StrCat("dp=", dp, ": ", plan.status().message()));
  }
  // One replica of another shape: the most workers that fit, then the widest tp (tensor-parallel
  // groups kept), then the most stages. A checkpoint loads on any layout.
  if (per_replica > workers) {
    std::optional<JobPlan> best;
    int64_t best_workers = 0;
    for (int tp = p.tp(); tp >= 1; --tp) {
      for (int64_t pp = workers / tp; pp >= 1; --pp) {
        if (pp * tp <= best_workers) break;
        JobSpec other = planned;
        ParallelLayout* layout = other.mutable_parallel();
        layout->set_dp(1);
        layout->set_pp(static_cast<int>(pp));
        layout->set_tp(tp);
        layout->clear_stage_layers();  // a cut of the old stages; the plan cuts the new ones
        absl::StatusOr<JobPlan> plan = MakeJobPlan(other);
        if (!plan.ok()) continue;
        best = std::move(*plan);
        best_workers = pp * tp;
      }
    }
    if (best.has_value()) return *std::move(best);
  }
  if (tried.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no layout of this job fits ", workers, workers == 1 ? " worker" : " workers",
        " (one replica needs parallel.pp*tp=", p.pp(), "*", p.tp(), "=", per_replica, ")"));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("no smaller dp fits: ", absl::StrJoin(tried, "; ")));
}

int64_t ModelParameters(const ModelConfig& model) {
  return ChunkParameters(model, /*tp=*/1, model.n_layer(), /*has_embedding=*/true,
                         /*has_head=*/true);
}

absl::Status CheckJobLimits(const JobSpec& planned, const JobLimits& limits) {
  Problems problems;
  auto cap = [&](absl::string_view what, int64_t value, int64_t limit, absl::string_view flag) {
    if (value <= limit) return;
    problems.push_back(absl::StrCat(what, "=", value, " exceeds this coordinator's cap of ", limit,
                                    " (--", flag, ")"));
  };
  cap("model parameters", ModelParameters(planned.model()), limits.max_parameters,
      "max_job_parameters");
  cap("steps", planned.steps(), limits.max_steps, "max_job_steps");
  cap("parallel.dp*pp*tp", WorkersNeeded(planned.parallel()), limits.max_workers,
      "max_job_workers");
  return problems.empty() ? absl::OkStatus() : InvalidSpec(problems);
}

pipeline::ScheduleSpec ScheduleOf(const JobPlan& plan) {
  const ParallelLayout& layout = plan.spec().parallel();
  pipeline::ScheduleSpec s;
  s.kind = ScheduleKindOf(plan.schedule());
  s.stages = layout.pp();
  s.micro_batches = plan.micro_batches();
  s.virtual_stages = layout.virtual_stages();
  return s;
}

std::vector<pipeline::StageCosts> SimulationCosts(const JobPlan& plan) {
  std::vector<pipeline::StageCosts> costs;
  const int v = plan.spec().parallel().virtual_stages();
  for (const StagePlan& s : plan.stages()) {
    const double c = s.cost() / v;
    costs.push_back({c, c, c});
  }
  return costs;
}

absl::StatusOr<pipeline::SimResult> SimulatePlan(
    const JobPlan& plan, const std::vector<std::vector<pipeline::Action>>& actions) {
  const pipeline::ScheduleSpec schedule = ScheduleOf(plan);
  std::vector<std::vector<pipeline::Action>> lists = actions;
  for (int s = 0; actions.empty() && s < schedule.stages; ++s) {
    ASSIGN_OR_RETURN(std::vector<pipeline::Action> a, pipeline::StageActions(schedule, s));
    lists.push_back(std::move(a));
  }
  return pipeline::SimulateActions(lists, schedule.micro_batches, schedule.virtual_stages,
                                   SimulationCosts(plan), /*latency=*/0);
}

const LayerRange& ChunkOf(const JobPlan& plan, int stage, int chunk) {
  return plan.stages(stage).chunks(chunk);
}

int64_t PlansMadeForTesting() { return plans_made.load(std::memory_order_relaxed); }

namespace {

absl::StatusOr<JobPlan> PlanChecked(JobSpec spec, Problems problems) {
  plans_made.fetch_add(1, std::memory_order_relaxed);
  const int64_t micro_batches = CheckAndDefault(spec, &problems);
  if (!problems.empty()) return InvalidSpec(problems);
  JobPlan plan;
  *plan.mutable_spec() = std::move(spec);
  plan.set_ranks(static_cast<int32_t>(WorkersNeeded(plan.spec().parallel())));
  plan.set_micro_batches(static_cast<int32_t>(micro_batches));
  plan.set_schedule(PlannedSchedule(plan.spec()));
  plan.set_device(PlannedDevice(plan.spec()));
  plan.set_on_worker_loss(PlannedWorkerLossPolicy(plan.spec()));
  plan.set_straggler_policy(PlannedStragglerPolicy(plan.spec()));
  plan.set_matmul_precision(PlannedMatmulPrecision(plan.spec()));
  RETURN_IF_ERROR(CutStages(plan));
  absl::StatusOr<pipeline::SimResult> sim = SimulatePlan(plan);
  if (!sim.ok()) {
    return InvalidSpec(absl::StrCat("parallel.schedule=\"", plan.spec().parallel().schedule(),
                                    "\" cannot run: ", sim.status().message()));
  }
  plan.set_bubble_fraction(sim->bubble_fraction);
  const int v = plan.spec().parallel().virtual_stages();
  for (int s = 0; s < plan.stages_size(); ++s) {
    StagePlan& stage = *plan.mutable_stages(s);
    stage.set_peak_live_micro_batches(sim->stages[s].peak_live);
    const std::vector<LayerRange> chunks(stage.chunks().begin(), stage.chunks().end());
    *stage.mutable_memory() =
        EstimateRankMemory(plan.spec(), s, chunks, PeakLivePerChunk(sim->stages[s], v));
  }
  return plan;
}

}  // namespace

absl::StatusOr<JobPlan> MakeJobPlan(JobSpec spec) { return PlanChecked(std::move(spec), {}); }

absl::StatusOr<JobPlan> ParseJobPlanJson(absl::string_view json) {
  JobSpec spec;
  Problems problems;
  RETURN_IF_ERROR(ReadJobSpecJson(json, &spec, &problems));
  return PlanChecked(std::move(spec), std::move(problems));
}

}  // namespace dtrain::plan
