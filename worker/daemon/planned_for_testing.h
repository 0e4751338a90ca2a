// What the coordinator adds to an assignment it sends (coordinator/job_manager_schedule.cc
// Place and coordinator/rank_assignment.h): the planned spec (plan/job_plan.h MakeJobPlan) and
// the rank's RankPlan (plan/rank_plan.h). For the tests that make assignments by hand; the worker
// daemon itself never plans.
#ifndef DTRAIN_WORKER_DAEMON_PLANNED_FOR_TESTING_H_
#define DTRAIN_WORKER_DAEMON_PLANNED_FOR_TESTING_H_

#include "absl/status/statusor.h"
#include "plan/job_plan.h"
#include "plan/rank_plan.h"
#include "plan/ranks.h"
#include "proto/coordinator.pb.h"

namespace dtrain::worker {

// `a` with its spec planned and the RankPlan of its rank (a.rank()'s coordinates); the plan's
// error when it rejects the spec.
inline absl::StatusOr<JobAssignment> PlannedForTesting(JobAssignment a) {
  absl::StatusOr<JobPlan> job = plan::MakeJobPlan(a.spec());
  if (!job.ok()) return job.status();
  *a.mutable_spec() = job->spec();
  a.mutable_spec()->mutable_parallel()->clear_stage_layers();
  *a.mutable_rank_plan() =
      plan::RankPlanOf(*job, plan::RankIndex(job->spec().parallel(), a.rank()));
  return a;
}

// PlannedForTesting, or `a` as it is when the plan rejects its spec (a test of what a worker
// does with an assignment no coordinator would send).
inline JobAssignment PlannedIfValidForTesting(const JobAssignment& a) {
  absl::StatusOr<JobAssignment> planned = PlannedForTesting(a);
  return planned.ok() ? *std::move(planned) : a;
}

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_PLANNED_FOR_TESTING_H_
