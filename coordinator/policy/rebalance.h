// The straggler policy "rebalance" (StragglerSpec in proto/job.proto): re-cut a pipeline's layers
// from the measured time each stage computes per step, so that a slow stage holds fewer layers.
// Pure: JobManager::RebalanceJob applies the decision (a planned restart on the new cut from the
// job's latest sealed checkpoint, through the recovery path; recovery.h).
//
// Each stage's speed is its measured compute time per step over its planned cost (plan/
// stage_cuts.h: layers + embedding + head, in transformer blocks), so a stage whose worker is
// twice slower has twice the time per unit of cost. The new cut minimises the slowest stage's
// predicted time, speed * new cost (PartitionLayersBySpeed), and is taken only when that is
// better than the slowest stage's measured time by `margin` (10%): a re-cut costs a restart.
//
//   ASSIGN_OR_RETURN(plan::JobPlan plan, plan::MakeJobPlan(run_spec));
//   ASSIGN_OR_RETURN(RebalanceDecision d, DecideRebalance(plan, {0.2, 0.8, 0.2}));
//   d.move;            // true
//   d.to;              // 3, 1, 2 (from 2, 2, 2)
//   d.summary;         // "stage 1 measured 4.0x slower per layer: cut 2,2,2 -> 3,1,2
//                      //  (slowest stage predicted 0.40 s per step, measured 0.80 s)"
#ifndef DTRAIN_COORDINATOR_POLICY_REBALANCE_H_
#define DTRAIN_COORDINATOR_POLICY_REBALANCE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace dtrain::coordinator {

inline constexpr double kRebalanceMargin = 0.1;

struct RebalanceDecision {
  std::vector<int> from;                // the current cut: layers per stage
  std::vector<int> to;                  // the proposed cut (== from when no better one exists)
  std::vector<double> stage_compute_s;  // per stage: the measured compute per step given
  std::vector<double> time_per_cost;    // per stage: measured seconds per unit of planned cost
  double measured_s = 0;                // the slowest stage's measured compute per step
  double predicted_s = 0;               // the slowest stage's predicted compute on `to`
  int slowest_stage = 0;                // the stage slowest per unit of cost
  double slowdown = 1;                  // its time per cost / the mean of the other stages'
  bool move = false;                    // `to` is predicted better by the margin: re-cut
  // One line for events: "stage 1 measured 2.1x slower per layer: cut 2,2,2 -> 3,1,2 (...)",
  // or why not: "... the best cut 2,2,2 is the current one" / "... predicted 0.95 s, not 10%
  // better than the measured 1.00 s".
  std::string summary;
};

// The cut the plan of the current run (`plan`: MakeJobPlan of its spec) should move to, given
// each pipeline stage's measured compute seconds per step (pp entries, in stage order; e.g. the
// mean over a straggler window of the stage's slowest rank). `stage_workers`, when given (pp
// entries: "w2", "w2,w5"), names the slowest stage's workers in the summary. InvalidArgument
// when the times do not match the plan's stages or are not positive, FailedPrecondition for a
// plan whose cut cannot be given (interleaved: several chunks per stage; pp = 1: nothing to move).
absl::StatusOr<RebalanceDecision> DecideRebalance(const JobPlan& plan,
                                                  absl::Span<const double> stage_compute_s,
                                                  absl::Span<const std::string> stage_workers = {},
                                                  double margin = kRebalanceMargin);

// Each pipeline stage's measured compute seconds per step from its ranks' straggler scores
// (StragglerScore.compute_s, by rank in placement order): the slowest rank of each stage, as the
// stage waits for it. pp entries; 0 for a stage none of whose ranks has a score.
std::vector<double> StageComputeSeconds(const Placement& placement, int pp,
                                        absl::Span<const StragglerScore> scores);

// Each pipeline stage's workers in a placement, in stage order: "w2" (or "w2,w5" with dp or tp).
std::vector<std::string> StageWorkers(const Placement& placement, int pp);

// The spec a recovery places: `spec` (the submitted or the current run's, recovery.h) keeping
// the pipeline's cut while its stages stay: the cut `recovery` rebalances to, else the current
// run's (`run_spec`: a past rebalance), when it has as many entries as `spec` has stages.
JobSpec KeepCut(const Recovery& recovery, const JobSpec& run_spec, JobSpec spec);

// "2,2,2".
std::string CutText(absl::Span<const int> layers);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_POLICY_REBALANCE_H_
