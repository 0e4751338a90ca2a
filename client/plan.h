// `dtrain plan JOB.json`: what a job would look like on a cluster, without a coordinator. From
// the job's plan (plan/job_plan.h: the spec validated and defaulted, stage cuts, the schedule
// simulated, each rank's memory; the coordinator's own function) it places the ranks on
// hypothetical workers (plan/placement.h, the coordinator's own function) and shows the
// simulated step.
//
//   ASSIGN_OR_RETURN(JobPlan job, plan::ParseJobPlanJson(json));
//   PlanOptions options;
//   options.hosts = 2;  // dp*pp*tp workers w0.. on hosts h0, h1
//   ASSIGN_OR_RETURN(Plan plan, MakePlan(job, options));
//   std::cout << PlanText(plan, "job.json");
//
// Simulation costs: plan::SimulationCosts. Memory: plan/memory.h (per rank, every term).
//
// Activations: the PEAK ACTIVATIONS of the schedule table and the ACTIVATIONS of the memory
// table are both plan/memory.h's estimate (StagePlan.memory.activations), the one the
// coordinator places by: per chunk, the most micro-batches the simulated schedule keeps alive
// times what one keeps for its backward.
#ifndef DTRAIN_CLIENT_PLAN_H_
#define DTRAIN_CLIENT_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/placement.h"
#include "plan/schedule.h"
#include "plan/simulate.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace dtrain {
namespace client {

struct PlanOptions {
  int workers = 0;  // hypothetical workers w0..w(N-1); 0: exactly dp*pp*tp
  int hosts = 1;    // host labels h0..h(H-1), workers spread over them in blocks
};

struct Plan {
  JobPlan job;                      // the job's plan
  JobSpec spec;                     // job.spec(): validated and defaulted
  std::vector<WorkerInfo> workers;  // the hypothetical workers
  plan::PlacementResult placed;     // ranks, layers and stage costs
  pipeline::ScheduleSpec schedule;  // p = pp, m = micro-batches per replica, v
  std::vector<pipeline::StageCosts> costs;
  pipeline::SimResult sim;
  double one_f_one_b_bubble = 0;      // (p-1)/(m+p-1)
  double one_f_one_b_simulated = 0;   // 1F1B simulated on the same stage costs
  std::vector<int> peak_live_layers;  // per stage
};

// The placement and simulation of a job's plan (plan::MakeJobPlan, which already rejected every
// spec that cannot run). Errors: InvalidArgument for bad options; ResourceExhausted when
// --workers is below dp*pp*tp; FailedPrecondition "deadlock: ..." from the simulator (only
// with MakePlanWithActions' lists).
absl::StatusOr<Plan> MakePlan(const JobPlan& job, const PlanOptions& options);

// MakePlan with the given per-stage action lists instead of the schedule's (tests: a list that
// deadlocks).
absl::StatusOr<Plan> MakePlanWithActions(const JobPlan& job, const PlanOptions& options,
                                         const std::vector<std::vector<pipeline::Action>>& actions);

// One row per stage, `width` columns for the makespan: each action is its letter (F forward,
// B fused backward, b input gradient, w weight gradient), its micro-batch (".chunk" when v > 1
// and it fits) and '-' to its end; '.' is idle.
//   stage 0 |F0-F1-F2-F3-B0----F4-B1----...
std::vector<std::string> TimelineRows(const pipeline::SimResult& sim, int virtual_stages,
                                      int width);

// The report of `dtrain plan`: layout, rank table, stages, timeline, bubbles, memory.
std::string PlanText(const Plan& plan, const std::string& path);
// The same as one line of JSON (every timeline included): the PlanReport message
// (proto/plan.proto) in protobuf's JSON mapping, every field printed.
std::string PlanJson(const Plan& plan, const std::string& path);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_PLAN_H_
