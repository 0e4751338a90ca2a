#include "coordinator/policy/rebalance.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "plan/stage_cuts.h"

namespace dtrain::coordinator {
std::string CutText(absl::Span<const int> layers) { return absl::StrJoin(layers, ","); }

std::vector<double> StageComputeSeconds(const Placement& placement, int pp,
                                        absl::Span<const StragglerScore> scores) {
  std::vector<double> seconds(pp, 0.0);
  for (const StragglerScore& s : scores) {
    if (s.rank() < 0 || s.rank() >= placement.ranks_size()) continue;
    const int stage = placement.ranks(s.rank()).pp_rank();
    if (stage >= 0 && stage < pp) seconds[stage] = std::max(seconds[stage], s.compute_s());
  }
  return seconds;
}

std::vector<std::string> StageWorkers(const Placement& placement, int pp) {
  std::vector<std::vector<std::string>> workers(pp);
  for (const RankAssignment& r : placement.ranks()) {
    if (r.pp_rank() < 0 || r.pp_rank() >= pp) continue;
    std::vector<std::string>& stage = workers[r.pp_rank()];
    if (std::find(stage.begin(), stage.end(), r.worker_id()) == stage.end()) {
      stage.push_back(r.worker_id());
    }
  }
  std::vector<std::string> names;
  for (const std::vector<std::string>& stage : workers) names.push_back(absl::StrJoin(stage, ","));
  return names;
}

JobSpec KeepCut(const Recovery& recovery, const JobSpec& run_spec, JobSpec spec) {
  const auto& cut = !recovery.rebalance_to().empty() ? recovery.rebalance_to()
                                                     : run_spec.parallel().stage_layers();
  if (!cut.empty() && cut.size() == std::max(1, spec.parallel().pp())) {
    *spec.mutable_parallel()->mutable_stage_layers() = cut;
  }
  return spec;
}

absl::StatusOr<RebalanceDecision> DecideRebalance(const JobPlan& plan,
                                                  absl::Span<const double> stage_compute_s,
                                                  absl::Span<const std::string> stage_workers,
                                                  double margin) {
  const int pp = plan.stages_size();
  if (static_cast<int>(stage_compute_s.size()) != pp) {
    return absl::InvalidArgumentError(
        absl::StrCat(stage_compute_s.size(), " stage times for a pipeline of ", pp, " stages"));
  }
  if (pp < 2) return absl::FailedPreconditionError("one pipeline stage: no layers to move");
  if (plan.spec().parallel().virtual_stages() > 1) {
    return absl::FailedPreconditionError(
        "schedule \"interleaved\" cuts several chunks per stage: rebalance re-cuts only one "
        "chunk per stage");
  }
  RebalanceDecision d;
  for (int s = 0; s < pp; ++s) {
    const double t = stage_compute_s[s];
    if (!(t > 0) || !std::isfinite(t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", s, "'s measured compute per step is ", t, " s, not positive"));
    }
    d.from.push_back(plan.stages(s).chunks(0).num_layers());
    d.stage_compute_s.push_back(t);
    d.time_per_cost.push_back(t / plan.stages(s).cost());
    d.measured_s = std::max(d.measured_s, t);
  }
  d.slowest_stage = static_cast<int>(
      std::max_element(d.time_per_cost.begin(), d.time_per_cost.end()) - d.time_per_cost.begin());
  double others = 0;
  for (int s = 0; s < pp; ++s) others += s == d.slowest_stage ? 0 : d.time_per_cost[s];
  d.slowdown = d.time_per_cost[d.slowest_stage] / (others / (pp - 1));

  const plan::StageCostModel cost = plan::CostModelFor(plan.spec().model(), plan.spec().seq_len());
  ASSIGN_OR_RETURN(
      plan::LayerPartition cut,
      plan::PartitionLayersBySpeed(plan.spec().model().n_layer(), d.time_per_cost, cost));
  d.to = cut.num_layers;
  for (int s = 0; s < pp; ++s) {
    d.predicted_s = std::max(d.predicted_s, d.time_per_cost[s] * cut.costs[s]);
  }
  const std::string measured =
      absl::StrFormat("stage %d%s measured %.1fx slower per layer", d.slowest_stage,
                      static_cast<int>(stage_workers.size()) == pp
                          ? absl::StrCat(" (", stage_workers[d.slowest_stage], ")")
                          : "",
                      d.slowdown);
  if (d.to == d.from) {
    d.summary = absl::StrCat(measured, ": the best cut ", CutText(d.to), " is the current one");
    return d;
  }
  d.move = d.predicted_s <= d.measured_s * (1 - margin);
  if (d.move) {
    d.summary = absl::StrFormat(
        "%s: cut %s -> %s (slowest stage predicted %.2f s per step, measured %.2f s)", measured,
        CutText(d.from), CutText(d.to), d.predicted_s, d.measured_s);
  } else {
    d.summary = absl::StrFormat(
        "%s: not moving from cut %s to %s: its slowest stage is predicted %.2f s per step, not "
        "%.0f%% better than the measured %.2f s",
        measured, CutText(d.from), CutText(d.to), d.predicted_s, margin * 100, d.measured_s);
  }
  return d;
}

}  // namespace dtrain::coordinator
