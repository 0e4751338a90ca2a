// One rank's part of a job's plan (proto/plan.proto RankPlan): what the coordinator sends each
// rank of a placement (JobAssignment.rank_plan), and what dtrain-local and the tests give the
// trainers. Made from a JobPlan (MakeJobPlan's output) only, so a worker trains on what the
// coordinator planned and never plans a spec itself.
//
//   ASSIGN_OR_RETURN(JobPlan job, MakeJobPlan(spec));         // the coordinator, once
//   RankPlan mine = RankPlanOf(job, 5);                         // sent to rank 5's worker
//   mine.chunks(0).first_layer();  mine.schedule();             // SCHEDULE_1F1B, ...
#ifndef DTRAIN_PLAN_RANK_PLAN_H_
#define DTRAIN_PLAN_RANK_PLAN_H_

#include "proto/plan.pb.h"

namespace dtrain::plan {

// Rank `rank` (RankIndex order, in [0, plan.ranks())) of `plan`: its layout (without
// stage_layers), schedule, micro-batches, its stage's chunks and memory, the job's device.
RankPlan RankPlanOf(const JobPlan& plan, int rank);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_RANK_PLAN_H_
