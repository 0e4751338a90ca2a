// What one rank of a placed job receives in its heartbeat answer: its own part of the job's
// JobAssignment, never the whole placement, so the bytes a worker is sent for a job do not grow
// with the job (a 4,096-rank job's whole placement is about 1.4 MB per rank; a rank's part is
// well under 1 KiB at any size: rank_assignment_test).
//
//   std::shared_ptr<const JobAssignment> whole = ...;   // the coordinator's: every rank
//   JobAssignment mine = AssignmentForRank(*whole, 17);  // what rank 17's worker is sent
//
// The part (proto/coordinator.proto JobAssignment): job id, uid and attempt as they are; the
// spec without parallel.stage_layers (pp entries: the rank's own layers are in its
// RankAssignment); `rank`, the rank's own RankAssignment, whole; `placement` with the rank's own
// entry and one entry per peer it talks to (plan/ranks.h PeerRanks: at most 8), each peer's
// holding only its coordinates, worker id and address, in rank order; the run's peer_secret;
// no stage_costs. With ranks of its dp group on several hosts: dp_host_index, the group's hosts
// (plan/ranks.h DpHostIndex: at most 64), and the peers the hierarchical all-reduce adds (at
// most 4 more entries).
// no stage_costs.
// `rank_plan`: the rank's part of the job's plan (plan/rank_plan.h RankPlanOf), cut from the
// whole assignment's job_plan, which the coordinator computed once for the placement and which
// is never sent (assignment format 2: a worker never plans a spec).
#ifndef DTRAIN_COORDINATOR_RANK_ASSIGNMENT_H_
#define DTRAIN_COORDINATOR_RANK_ASSIGNMENT_H_

#include "absl/status/status.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

// Sets whole->job_plan to the plan of whole->spec() (plan::MakeJobPlan) and whole->spec to the
// planned spec (unchanged for a spec the coordinator stored planned), for an assignment
// rebuilt without one (a coordinator restart's, from the stored placement). The plan's error
// when the spec no longer plans (the assignment is left without it).
absl::Status AttachJobPlan(JobAssignment* whole);

// Rank `rank_index` (RankIndex order, in [0, whole.placement().ranks_size())) of `whole`, a
// job's JobAssignment with its whole placement and its job_plan (rank unset). O(its peers),
// whatever the job's size.
JobAssignment AssignmentForRank(const JobAssignment& whole, int rank_index);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_RANK_ASSIGNMENT_H_
