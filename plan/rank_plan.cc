#include "plan/rank_plan.h"

#include "plan/ranks.h"

namespace dtrain::plan {

RankPlan RankPlanOf(const JobPlan& plan, int rank) {
  RankPlan r;
  r.set_rank(rank);
  *r.mutable_layout() = plan.spec().parallel();
  r.mutable_layout()->clear_stage_layers();
  r.set_schedule(plan.schedule());
  r.set_micro_batches(plan.micro_batches());
  r.set_micro_batch_size(plan.spec().micro_batch_size());
  r.set_device(plan.device());
  r.set_matmul_precision(plan.matmul_precision());
  const int stage = RankCoordinates(plan.spec().parallel(), rank).pp_rank();
  if (stage >= 0 && stage < plan.stages_size()) {
    *r.mutable_chunks() = plan.stages(stage).chunks();
    *r.mutable_memory() = plan.stages(stage).memory();
  }
  return r;
}

}  // namespace dtrain::plan
