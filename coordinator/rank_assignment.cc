#include "coordinator/rank_assignment.h"

#include "plan/job_plan.h"
#include "plan/rank_plan.h"
#include "plan/ranks.h"

namespace dtrain::coordinator {
namespace {

// The rank's dp all-reduce, chosen here for every member of its group alike: the group's hosts
// when the hierarchical all-reduce is the choice (plan/ranks.h DpHostIndex), else nothing.
void AddDpHostIndex(const JobAssignment& whole, int rank_index, JobAssignment* part) {
  for (int host : plan::DpHostIndex(whole.placement(), whole.spec().parallel(), rank_index)) {
    part->add_dp_host_index(host);
  }
}

}  // namespace

absl::Status AttachJobPlan(JobAssignment* whole) {
  absl::StatusOr<JobPlan> planned = plan::MakeJobPlan(whole->spec());
  if (!planned.ok()) return planned.status();
  *whole->mutable_spec() = planned->spec();  // every default set: the workers plan nothing
  *whole->mutable_job_plan() = *std::move(planned);
  return absl::OkStatus();
}

JobAssignment AssignmentForRank(const JobAssignment& whole, int rank_index) {
  JobAssignment part;
  part.set_job_id(whole.job_id());
  part.set_job_uid(whole.job_uid());
  part.set_attempt(whole.attempt());
  *part.mutable_spec() = whole.spec();
  part.mutable_spec()->mutable_parallel()->clear_stage_layers();
  const Placement& all = whole.placement();
  const RankAssignment& own = all.ranks(rank_index);
  *part.mutable_rank() = own;
  if (whole.has_job_plan())
    *part.mutable_rank_plan() = plan::RankPlanOf(whole.job_plan(), rank_index);
  Placement& placement = *part.mutable_placement();
  placement.set_peer_secret(all.peer_secret());
  bool own_listed = false;
  auto add_own = [&] {
    *placement.add_ranks() = own;
    own_listed = true;
  };
  AddDpHostIndex(whole, rank_index, &part);
  for (int peer : plan::PeerRanks(whole.spec().parallel(), rank_index, part.dp_host_index())) {
    if (peer >= all.ranks_size()) continue;  // a placement that does not match its layout
    if (!own_listed && peer > rank_index) add_own();
    const RankAssignment& p = all.ranks(peer);
    RankAssignment& entry = *placement.add_ranks();
    entry.set_dp_rank(p.dp_rank());
    entry.set_pp_rank(p.pp_rank());
    entry.set_tp_rank(p.tp_rank());
    entry.set_worker_id(p.worker_id());
    entry.set_worker_address(p.worker_address());
  }
  if (!own_listed) add_own();
  return part;
}

}  // namespace dtrain::coordinator
