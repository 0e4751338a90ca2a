#include "coordinator/policy/stragglers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "plan/ranks.h"

namespace dtrain::coordinator {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Who(const StragglerScore& s) {
  return absl::StrFormat("rank %d (%s, %s)", s.rank(), s.worker_id(), s.label());
}

}  // namespace

std::vector<double> RankCosts(const Placement& placement) {
  std::vector<double> costs;
  for (const RankAssignment& r : placement.ranks()) {
    const int stage = r.pp_rank();
    const bool known =
        stage >= 0 && stage < placement.stage_costs_size() && placement.stage_costs(stage) > 0;
    costs.push_back(known ? placement.stage_costs(stage) : 1.0);
  }
  return costs;
}

StragglerScorer::StragglerScorer(const StragglerSpec& spec, const Placement& placement)
    : threshold_(spec.threshold()),
      window_(std::max(2, spec.window_steps())),
      costs_(RankCosts(placement)),
      compute_(costs_.size()),
      flagged_(costs_.size(), false) {
  for (const RankAssignment& r : placement.ranks()) {
    names_.emplace_back(r.worker_id(), plan::RankLabel(r));
  }
}

void StragglerScorer::Add(int rank, const RankTiming& timing) {
  if (rank < 0 || rank >= static_cast<int>(compute_.size()) || timing.step() <= scored_end_) {
    return;
  }
  // The run's first steps are not its pace (buffers allocated, caches and peers warming up).
  if (run_start_ == 0) run_start_ = timing.step();
  if (timing.step() < run_start_ + kWarmupSteps) return;
  std::map<int64_t, double>& steps = compute_[rank];
  steps.emplace(timing.step(), std::max(0.0, timing.compute_s()));
  // Keep the last two windows: enough for the ranks that run ahead of the slowest one.
  while (static_cast<int>(steps.size()) > 2 * window_) steps.erase(steps.begin());
}

std::optional<StragglerScorer::Result> StragglerScorer::Score() {
  const int n = static_cast<int>(compute_.size());
  if (n < 2) return std::nullopt;
  // The window ends at the newest step every rank has reported.
  int64_t end = INT64_MAX;
  for (const auto& steps : compute_) {
    if (steps.empty()) return std::nullopt;
    end = std::min(end, steps.rbegin()->first);
  }
  if (end <= scored_end_ || end < window_) return std::nullopt;
  const int64_t first = end - window_ + 1;
  std::vector<double> per_cost(n);  // n_r: mean compute per step per unit of planned cost
  std::vector<double> mean(n);
  for (int r = 0; r < n; ++r) {
    double sum = 0;
    int count = 0;
    for (auto it = compute_[r].lower_bound(first); it != compute_[r].end() && it->first <= end;
         ++it) {
      sum += it->second;
      ++count;
    }
    if (count < window_) return std::nullopt;  // a step is missing: wait for a full window
    mean[r] = sum / window_;
    per_cost[r] = mean[r] / costs_[r];
  }
  scored_end_ = end;
  Result result;
  result.window_end_step = end;
  for (int r = 0; r < n; ++r) {
    std::vector<double> peers;
    for (int j = 0; j < n; ++j) {
      if (j != r) peers.push_back(per_cost[j]);
    }
    const double peer = Median(std::move(peers));
    const double score = peer > 0 ? per_cost[r] / peer : 1.0;
    if (!flagged_[r] && score >= threshold_) {
      flagged_[r] = true;
      result.flagged.push_back(r);
    } else if (flagged_[r] && score < clear_below()) {
      flagged_[r] = false;
      result.recovered.push_back(r);
    }
    StragglerScore& s = result.scores.emplace_back();
    s.set_rank(r);
    s.set_worker_id(names_[r].first);
    s.set_label(names_[r].second);
    s.set_score(score);
    s.set_flagged(flagged_[r]);
    s.set_compute_s(mean[r]);
    s.set_peer_compute_s(peer * costs_[r]);
    s.set_window_end_step(end);
  }
  return result;
}

std::string StragglerFlagged(const StragglerScore& s, int window_steps) {
  return absl::StrFormat(
      "straggler: %s is %.1fx the median of its peers over the last %d steps (compute %.3g "
      "s/step vs %.3g s)",
      Who(s), s.score(), window_steps, s.compute_s(), s.peer_compute_s());
}

std::string StragglerCleared(const StragglerScore& s, int window_steps) {
  return absl::StrFormat(
      "straggler cleared: %s is back to %.1fx the median of its peers over "
      "the last %d steps",
      Who(s), s.score(), window_steps);
}

}  // namespace dtrain::coordinator
