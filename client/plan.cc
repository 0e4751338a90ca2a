#include "client/plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/format.h"
#include "google/protobuf/util/json_util.h"
#include "plan/job_plan.h"
#include "plan/spec_enums.h"

namespace dtrain {
namespace client {
namespace {

using pipeline::Action;
using pipeline::ActionType;

// The pipeline rank s of replica 0, tp rank 0: the layers every rank of stage s holds.
const RankAssignment& StageRank(const Plan& plan, int s) {
  const Placement& placement = plan.placed.placement;
  for (const RankAssignment& r : placement.ranks()) {
    if (r.dp_rank() == 0 && r.tp_rank() == 0 && r.pp_rank() == s) return r;
  }
  return placement.ranks(0);  // unreachable for a placement of pp stages
}

// Layers of chunk j of a rank (its whole range unless interleaved).
LayerRange ChunkLayers(const RankAssignment& r, int j) {
  if (r.chunks_size() > 0) return r.chunks(j);
  LayerRange range;
  range.set_first_layer(r.first_layer());
  range.set_num_layers(r.num_layers());
  return range;
}

std::string RangeString(const LayerRange& r) {
  if (r.num_layers() == 1) return absl::StrCat(r.first_layer());
  return absl::StrCat(r.first_layer(), "-", r.first_layer() + r.num_layers() - 1);
}

std::string LayersString(const RankAssignment& r) {
  std::vector<std::string> parts;
  const int chunks = std::max(1, r.chunks_size());
  for (int j = 0; j < chunks; ++j) parts.push_back(RangeString(ChunkLayers(r, j)));
  return absl::StrJoin(parts, ",");
}

std::string Percent(double fraction) { return absl::StrFormat("%.1f%%", 100 * fraction); }

std::string Bytes(double bytes) { return plan::FormatBytes(bytes); }

char Letter(ActionType t) {
  switch (t) {
    case ActionType::kForward:
      return 'F';
    case ActionType::kBackward:
      return 'B';
    case ActionType::kBackwardInput:
      return 'b';
    case ActionType::kBackwardWeight:
      return 'w';
  }
  return '?';
}

std::string WorkerHost(const Plan& plan, const std::string& id) {
  for (const WorkerInfo& w : plan.workers) {
    if (w.worker_id() == id) return w.host_label();
  }
  return "-";
}

}  // namespace

absl::StatusOr<Plan> MakePlan(const JobPlan& job, const PlanOptions& options) {
  return MakePlanWithActions(job, options, {});
}

absl::StatusOr<Plan> MakePlanWithActions(const JobPlan& job, const PlanOptions& options,
                                         const std::vector<std::vector<Action>>& actions) {
  Plan plan;
  plan.job = job;
  plan.spec = job.spec();
  const int64_t needed = job.ranks();
  if (options.workers < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--workers=", options.workers, " is negative"));
  }
  const int64_t n = options.workers > 0 ? options.workers : needed;
  if (options.hosts < 1 || options.hosts > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("--hosts=", options.hosts, " must be between 1 and the workers (", n, ")"));
  }
  // Workers in blocks of ceil(n / hosts) per host: w0..w3 on h0, w4..w7 on h1, ...
  const int64_t per_host = (n + options.hosts - 1) / options.hosts;
  for (int64_t i = 0; i < n; ++i) {
    WorkerInfo w;
    w.set_worker_id(absl::StrCat("w", i));
    w.set_host_label(absl::StrCat("h", i / per_host));
    w.set_state(IDLE);
    plan.workers.push_back(w);
  }
  absl::StatusOr<plan::PlacementResult> placed = plan::PlaceJob(job, plan.workers);
  if (!placed.ok()) return placed.status();
  plan.placed = *std::move(placed);

  plan.schedule = dtrain::plan::ScheduleOf(job);
  const int p = plan.schedule.stages, m = plan.schedule.micro_batches;
  const int v = plan.schedule.virtual_stages;
  plan.costs = dtrain::plan::SimulationCosts(job);
  absl::StatusOr<pipeline::SimResult> sim = dtrain::plan::SimulatePlan(job, actions);
  if (!sim.ok()) return sim.status();
  plan.sim = *std::move(sim);
  plan.one_f_one_b_bubble = (p - 1.0) / (m + p - 1.0);
  // The baseline on these (possibly unequal) stages: whole stages, fused backward.
  std::vector<pipeline::StageCosts> whole;
  for (const pipeline::StageCosts& c : plan.costs) {
    whole.push_back({c.forward * v, c.backward_input * v, c.backward_weight * v});
  }
  absl::StatusOr<pipeline::SimResult> baseline =
      pipeline::SimulateSchedule({pipeline::ScheduleKind::kOneFOneB, p, m, 1}, whole, 0);
  if (!baseline.ok()) return baseline.status();
  plan.one_f_one_b_simulated = baseline->bubble_fraction;

  // Layers live per stage: a chunk's layers from its F to the end of its backward.
  for (int s = 0; s < p; ++s) {
    const RankAssignment& rank = StageRank(plan, s);
    int live = 0, peak = 0;
    for (const pipeline::TimedAction& t : plan.sim.stages[s].timeline) {
      const int layers = ChunkLayers(rank, t.action.chunk).num_layers();
      if (t.action.type == ActionType::kForward) live += layers;
      if (t.action.type == ActionType::kBackward || t.action.type == ActionType::kBackwardWeight) {
        live -= layers;
      }
      peak = std::max(peak, live);
    }
    plan.peak_live_layers.push_back(peak);
  }
  return plan;
}

std::vector<std::string> TimelineRows(const pipeline::SimResult& sim, int virtual_stages,
                                      int width) {
  std::vector<std::string> rows;
  const double scale = sim.makespan > 0 ? width / sim.makespan : 0;
  for (const pipeline::StageResult& stage : sim.stages) {
    std::string row(width, '.');
    for (const pipeline::TimedAction& t : stage.timeline) {
      const int c0 = static_cast<int>(std::lround(t.start * scale));
      const int c1 = std::min(width, static_cast<int>(std::lround(t.end * scale)));
      if (c1 <= c0) continue;  // shorter than half a column
      const std::string letter(1, Letter(t.action.type));
      std::string text = absl::StrCat(letter, t.action.micro_batch);
      if (virtual_stages > 1) absl::StrAppend(&text, ".", t.action.chunk);
      if (static_cast<int>(text.size()) > c1 - c0) {
        text = absl::StrCat(letter, t.action.micro_batch);
        if (static_cast<int>(text.size()) > c1 - c0) text = letter;
      }
      for (int c = c0; c < c1; ++c) {
        row[c] = c - c0 < static_cast<int>(text.size()) ? text[c - c0] : '-';
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string PlanText(const Plan& plan, const std::string& path) {
  const JobSpec& spec = plan.spec;
  const ParallelLayout& layout = spec.parallel();
  const pipeline::ScheduleSpec& sched = plan.schedule;
  const int p = sched.stages, v = sched.virtual_stages;
  std::string out;
  absl::StrAppend(&out, "plan for ", path, spec.name().empty() ? "" : " (" + spec.name() + ")",
                  "\n");
  const int ranks = plan.placed.placement.ranks_size();
  absl::StrAppend(&out, "layout: ", LayoutString(layout), " (", ranks,
                  ranks == 1 ? " rank" : " ranks", "), schedule ", layout.schedule());
  if (v > 1) absl::StrAppend(&out, " with ", v, " virtual stages");
  absl::StrAppend(&out, ", ", sched.micro_batches, " micro-batches of ", spec.micro_batch_size(),
                  " sequences per replica per step\n");
  absl::StrAppend(&out, "device: ", DeviceAndPrecisionText(spec), "\n");
  const FaultTolerance& ft = spec.fault_tolerance();
  absl::StrAppend(&out, "on a failure: ",
                  ft.max_restarts() == 0
                      ? "the job fails (fault_tolerance.max_restarts 0)"
                      : absl::StrCat("up to ", ft.max_restarts(),
                                     " recoveries from the latest "
                                     "sealed checkpoint; too few workers: ",
                                     plan::PlannedWorkerLossPolicy(spec) == WORKER_LOSS_SHRINK
                                         ? "continue on fewer replicas, else wait "
                                         : "wait ",
                                     ft.wait_for()),
                  "\n");
  std::vector<std::string> hosts;
  for (const WorkerInfo& w : plan.workers) {
    if (hosts.empty() || hosts.back() != w.host_label()) hosts.push_back(w.host_label());
  }
  absl::StrAppend(&out, "workers: ", plan.workers.size(), " hypothetical (w0",
                  plan.workers.size() == 1 ? "" : absl::StrCat("..w", plan.workers.size() - 1),
                  ") on ", hosts.size(), hosts.size() == 1 ? " host" : " hosts");
  if (hosts.size() > 1) {
    absl::StrAppend(&out,
                    "; tensor-parallel groups split across hosts: ", plan.placed.split_tp_groups);
  }
  absl::StrAppend(&out, "\n\nranks:\n");

  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < plan.placed.placement.ranks_size(); ++i) {
    const RankAssignment& r = plan.placed.placement.ranks(i);
    rows.push_back({absl::StrCat(i), absl::StrCat(r.dp_rank()), absl::StrCat(r.pp_rank()),
                    absl::StrCat(r.tp_rank()), r.worker_id(), WorkerHost(plan, r.worker_id()),
                    LayersString(r),
                    Bytes(static_cast<double>(plan.job.stages(r.pp_rank()).memory().total()))});
  }
  absl::StrAppend(
      &out, FormatTable({"RANK", "DP", "PP", "TP", "WORKER", "HOST", "LAYERS", "MEMORY"}, rows));

  absl::StrAppend(&out, "\nstages (cost: transformer-block forwards per micro-batch):\n");
  rows.clear();
  for (int s = 0; s < p; ++s) {
    rows.push_back({absl::StrCat(s), LayersString(StageRank(plan, s)),
                    absl::StrFormat("%.2f", plan.placed.placement.stage_costs(s))});
  }
  absl::StrAppend(&out, FormatTable({"STAGE", "LAYERS", "COST"}, rows));

  const int width = 100;
  absl::StrAppend(&out, "\nschedule ", layout.schedule(),
                  ", one step, 1 column = ", absl::StrFormat("%.3g", plan.sim.makespan / width),
                  " cost units:\n", "(F forward = cost, ",
                  sched.kind == pipeline::ScheduleKind::kZeroBubbleH1
                      ? "b input gradient = cost, w weight gradient = cost"
                      : "B backward = 2 * cost, its input gradient sent after the first cost",
                  v > 1 ? "; digits: micro-batch.chunk" : "; digits: micro-batch", "; '.' idle)\n");
  const std::vector<std::string> timeline = TimelineRows(plan.sim, v, width);
  const std::string last_label = absl::StrCat("stage ", p - 1);
  for (int s = 0; s < p; ++s) {
    absl::StrAppend(&out, absl::StrFormat("%-*s |", last_label.size(), absl::StrCat("stage ", s)),
                    timeline[s], "|\n");
  }

  absl::StrAppend(&out, "\n");
  rows.clear();
  for (int s = 0; s < p; ++s) {
    const pipeline::StageResult& st = plan.sim.stages[s];
    rows.push_back({absl::StrCat(s), absl::StrFormat("%.2f", st.busy), Percent(st.bubble_fraction),
                    absl::StrCat(st.peak_live), absl::StrCat(plan.peak_live_layers[s]),
                    Bytes(static_cast<double>(plan.job.stages(s).memory().activations()))});
  }
  absl::StrAppend(
      &out, FormatTable({"STAGE", "BUSY", "BUBBLE", "PEAK LIVE", "PEAK LAYERS", "PEAK ACTIVATIONS"},
                        rows));
  absl::StrAppend(&out, "(live: micro-batch", v > 1 ? "-chunks" : "es",
                  " between the end of their F and the end of their backward",
                  sched.kind == pipeline::ScheduleKind::kZeroBubbleH1 ? " (w)" : "", ")\n");
  absl::StrAppend(&out, "bubble: ", Percent(plan.sim.bubble_fraction),
                  " simulated overall (one step: ", absl::StrFormat("%.2f", plan.sim.makespan),
                  " cost units)\n1F1B: textbook theory (p-1)/(m+p-1) = ", p - 1, "/",
                  sched.micro_batches + p - 1, " = ", Percent(plan.one_f_one_b_bubble),
                  " (input gradients sent after the weight gradients)");
  if (sched.kind != pipeline::ScheduleKind::kOneFOneB) {
    absl::StrAppend(&out, "; simulated on these stages ", Percent(plan.one_f_one_b_simulated));
  }
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out,
                  "\nmemory per rank (fp32; the same for every rank of a stage; the "
                  "coordinator places no rank on a worker with less device memory):\n");
  rows.clear();
  // A column for the CUDA backend's scratch only where a rank may run on CUDA.
  const bool scratch = plan.job.device() != DEVICE_CPU;
  for (const StagePlan& stage : plan.job.stages()) {
    const RankMemory& m = stage.memory();
    rows.push_back({absl::StrCat(stage.stage()), Bytes(m.parameters()), Bytes(m.gradients()),
                    Bytes(m.optimizer()), Bytes(m.activations()), Bytes(m.communication())});
    if (scratch) rows.back().push_back(Bytes(m.device_scratch()));
    rows.back().push_back(Bytes(m.checkpoint_snapshot()));
    rows.back().push_back(Bytes(m.total()));
  }
  std::vector<std::string> header = {"STAGE",     "PARAMETERS",  "GRADIENTS",
                                     "OPTIMIZER", "ACTIVATIONS", "COMMUNICATION"};
  if (scratch) header.push_back("CUDA SCRATCH");
  header.push_back("CHECKPOINT");
  header.push_back("TOTAL");
  absl::StrAppend(&out, FormatTable(header, rows));
  absl::StrAppend(
      &out, "(optimizer: AdamW m and v", plan.spec.parallel().zero1() ? ", 1/dp each (zero1)" : "",
      "; activations at the schedule's peak; communication: pipeline messages",
      plan.spec.parallel().dp() > 1 && !plan.spec.parallel().zero1() ? " and two gradient buckets"
                                                                     : "",
      scratch ? (plan.job.matmul_precision() == MATMUL_BF16
                     ? "; CUDA scratch: partial column sums and bf16 copies of GEMM operands"
                     : "; CUDA scratch: partial column sums")
              : "",
      "; checkpoint: its files in host memory from the snapshot until written",
      plan.job.device() == DEVICE_CUDA ? ", not in the total (host memory on a GPU worker)" : "",
      ")\n");
  // One worker's trainer runs the whole batch at once (plan/memory.h).
  const int64_t sequences = plan.job.ranks() == 1 ? spec.batch_size() : spec.micro_batch_size();
  absl::StrAppend(&out,
                  "activations (PEAK ACTIVATIONS above, ACTIVATIONS here): plan/memory.h's "
                  "estimate, per chunk\n  the most micro-batches alive at once times what one "
                  "keeps for its backward (fp32; b=",
                  sequences, " T=", spec.seq_len(), " C=", spec.model().n_embd(),
                  " NH=", spec.model().n_head(), " tp=", spec.parallel().tp(),
                  "; the last stage's logits included)\n");
  return out;
}

std::string PlanJson(const Plan& plan, const std::string& path) {
  PlanReport report;
  report.set_file(path);
  report.set_name(plan.spec.name());
  *report.mutable_plan() = plan.job;
  report.set_workers(static_cast<int32_t>(plan.workers.size()));
  report.set_split_tp_groups(plan.placed.split_tp_groups);
  for (int i = 0; i < plan.placed.placement.ranks_size(); ++i) {
    const RankAssignment& r = plan.placed.placement.ranks(i);
    PlannedRank& rank = *report.add_ranks();
    rank.set_rank(i);
    rank.set_dp(r.dp_rank());
    rank.set_pp(r.pp_rank());
    rank.set_tp(r.tp_rank());
    rank.set_worker(r.worker_id());
    rank.set_host(WorkerHost(plan, r.worker_id()));
    rank.set_layers(LayersString(r));
    rank.set_memory_bytes(plan.job.stages(r.pp_rank()).memory().total());
  }
  for (int s = 0; s < plan.schedule.stages; ++s) {
    const pipeline::StageResult& st = plan.sim.stages[s];
    StageTimeline& stage = *report.add_stages();
    stage.set_stage(s);
    stage.set_layers(LayersString(StageRank(plan, s)));
    stage.set_cost(plan.placed.placement.stage_costs(s));
    stage.set_busy(st.busy);
    stage.set_bubble_fraction(st.bubble_fraction);
    stage.set_peak_live_micro_batches(st.peak_live);
    stage.set_peak_awaiting_input_grad(st.peak_awaiting_input_grad);
    stage.set_peak_live_layers(plan.peak_live_layers[s]);
    stage.set_peak_activation_bytes(plan.job.stages(s).memory().activations());
    for (const pipeline::TimedAction& t : st.timeline) {
      TimedAction& a = *stage.add_timeline();
      a.set_action(pipeline::ActionToString(t.action));
      a.set_start(t.start);
      a.set_end(t.end);
    }
  }
  report.set_makespan(plan.sim.makespan);
  report.set_bubble_fraction(plan.sim.bubble_fraction);
  report.set_one_f_one_b_bubble(plan.one_f_one_b_bubble);
  report.set_one_f_one_b_simulated(plan.one_f_one_b_simulated);
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(report, &json, options).ok()) return "{}";
  return json;
}

}  // namespace client
}  // namespace dtrain
