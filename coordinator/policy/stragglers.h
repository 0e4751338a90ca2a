// Straggler scoring (JobSpec.stragglers, proto/job.proto StragglerSpec): which rank of a running
// job is persistently slower than its peers. Pure: no clock, no I/O; the job manager feeds it
// the ranks' step timings (HeartbeatRequest.timings) and acts on what it flags.
//
// What is compared: each rank's *compute* time per step. A slowed rank (a busy host, a throttled
// device, a SIGSTOP duty cycle) spends its lost wall time in its own compute, while its peers
// spend theirs waiting on it (bubble, communication wait): comparing wall or wait times would
// blame the victims. Ranks do not have the same work: a pipeline stage's compute is normalised
// by its planned cost (Placement.stage_costs, plan/stage_cuts.h's cost model: the first and last
// stages carry the embedding and the head), so a balanced healthy job scores ~1.0 everywhere.
//
// Over the newest window of `window_steps` steps that every rank reported in full (the first
// kWarmupSteps steps of a run left out):
//   m_r     = rank r's mean compute per step                     (seconds)
//   n_r     = m_r / cost_r                                       (seconds per unit of cost)
//   score_r = n_r / median{ n_j : j != r }                       (1.0: at its peers' pace)
// A rank is flagged when score_r >= threshold, and un-flagged (hysteresis: no flapping around
// the threshold) once score_r < 1 + (threshold - 1) / 2: for threshold 1.5, below 1.25.
//
//   StragglerScorer scorer(job.spec().stragglers(), job.placement());
//   scorer.Add(1, timing);                      // every rank's timings, in any order
//   if (std::optional<StragglerScorer::Result> r = scorer.Score()) { ... r->flagged ... }
// A new run (a recovery, a replace, a rebalance) gets a new scorer: its window starts again.
#ifndef DTRAIN_COORDINATOR_POLICY_STRAGGLERS_H_
#define DTRAIN_COORDINATOR_POLICY_STRAGGLERS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace dtrain::coordinator {

// Each rank's planned cost per step, in placement order: its pipeline stage's stage_costs entry
// (1.0 for every rank when the placement has none).
std::vector<double> RankCosts(const Placement& placement);

class StragglerScorer {
 public:
  struct Result {
    int64_t window_end_step = 0;
    std::vector<StragglerScore> scores;  // by rank: rank, score, flagged, compute_s, peer_...
    std::vector<int> flagged;            // ranks flagged by this window (they were not before)
    std::vector<int> recovered;          // ranks un-flagged by this window
  };

  // `spec`: a planned StragglerSpec (threshold > 1, window_steps >= 2); `placement`: the run's
  // (its ranks name the scores' worker and label; RankCosts its costs).
  StragglerScorer(const StragglerSpec& spec, const Placement& placement);

  // One step of `rank`; a rank out of range, a step already held or one older than what is kept
  // (the last two windows) is ignored.
  void Add(int rank, const RankTiming& timing);
  // The scores of the newest window every rank reported in full, when it ends after the last
  // window scored; nullopt otherwise (fewer than two ranks, a window not complete yet).
  std::optional<Result> Score();

  int window_steps() const { return window_; }
  // Steps left out at the start of every run (the first step any rank reports and the ones
  // after it): allocation and warm-up, not the rank's pace.
  static constexpr int kWarmupSteps = 3;
  // The midpoint of 1 and the threshold: a flagged rank scoring below it is un-flagged.
  double clear_below() const { return 1 + (threshold_ - 1) / 2; }

 private:
  const double threshold_;
  const int window_;
  const std::vector<double> costs_;
  std::vector<std::pair<std::string, std::string>> names_;  // per rank: worker id, label
  std::vector<std::map<int64_t, double>> compute_;          // per rank: step -> compute seconds
  std::vector<bool> flagged_;
  int64_t scored_end_ = 0;  // the last window scored ended at this step
  int64_t run_start_ = 0;   // the first step any rank reported: the run's first
};

// The event of a flag: "straggler: rank 1 (w2, dp0 pp1 tp0) is 2.4x the median of its peers
// over the last 20 steps (compute 0.81 s/step vs 0.34 s)" (3 significant digits: 0.0123 s).
std::string StragglerFlagged(const StragglerScore& score, int window_steps);
// The event of its recovery: "straggler cleared: rank 1 (w2, dp0 pp1 tp0) is back to 1.1x the
// median of its peers over the last 20 steps".
std::string StragglerCleared(const StragglerScore& score, int window_steps);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_POLICY_STRAGGLERS_H_
