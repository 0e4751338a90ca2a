// How the ranks of a job are named, and which rank does what: one rule each, used by the
// coordinator (placement, failure reports), `dtrain plan` and the workers. The numbering itself
// (WorkersNeeded, RankIndex, RankCoordinates) is common/rank_numbering.h, re-exported here.
#ifndef DTRAIN_PLAN_RANKS_H_
#define DTRAIN_PLAN_RANKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/rank_numbering.h"
#include "proto/job.pb.h"

namespace dtrain::plan {

using ::dtrain::RankCoordinates;
using ::dtrain::RankIndex;
using ::dtrain::WorkersNeeded;

// The rank whose step metrics the coordinator records: dp 0, the last pipeline stage, tp 0.
// Every rank computes the same global loss and gradient norm; only this one sends its steps,
// so the coordinator gets one report per step, not dp*pp*tp.
int ReportingRank(const ParallelLayout& layout);

// The layout a job runs on now: its latest placed recovery's (Job.recoveries: "shrink" may have
// made it smaller, a grow back restores the submitted one), else the spec's. What the coordinator
// runs the job on and what the CLI shows.
struct CurrentLayout {
  ParallelLayout layout;
  // When `layout` differs from the spec's in dp, pp or tp: the number of the recovery that moved
  // the job onto it (the first of the latest recoveries that all placed it there); else 0.
  int changed_by_recovery = 0;
};
CurrentLayout JobCurrentLayout(const JobSpec& spec, absl::Span<const Recovery> recoveries);

// The ranks that `rank` (in [0, WorkersNeeded(layout))) exchanges messages with, ascending,
// without itself: at most 8, whatever the job's size. The coordinator sends a rank the
// addresses of these and no others (JobAssignment.placement), and the rank connects to these
// only. Each set is symmetric (q is a peer of r exactly when r is one of q's):
//   - pipeline: the same (dp, tp) one stage before and after, wrapping around (the interleaved
//     schedule's last stage feeds the first; the first and last stages sum the tied
//     embedding's gradient);
//   - its tensor-parallel group's ring: tp_rank -+ 1 (mod tp), the same (dp, pp);
//   - its data-parallel group's ring: dp_rank -+ 1 (mod dp), the same (pp, tp);
//   - the whole job's ring (losses, norms, checkpoint votes): rank -+ 1 (mod dp*pp*tp).
// Every collective the trainer runs is a ring over one of these groups (worker/comm/groups.h
// gives their members in ring order), so these are all it talks to; parallel_job_test checks
// the rule against the groups.
// With a `dp_host_index` (DpHostIndex: the hierarchical all-reduce), also the ranks that
// all-reduce talks to (its per-host ring, the leaders' ring, the broadcast chain): the ring
// neighbours among the dp group's members on the rank's host and, on a host's leader (its first
// member), among the hosts' leaders; at most 4 more, still symmetric.
std::vector<int> PeerRanks(const ParallelLayout& layout, int rank,
                           absl::Span<const int> dp_host_index = {});

// The largest data-parallel group whose hosts a rank is sent: a larger group runs the flat ring,
// so what a rank receives stays bounded (64 bytes of hosts).
inline constexpr int kMaxDpHostIndex = 64;

// How the data-parallel all-reduce of `rank`'s group runs (worker/comm/collectives/
// allreduce_hierarchical.h), from `whole`, the job's whole placement (rank order) with each
// rank's RankAssignment.host_label: for member i of the group (dp order) the number of its host,
// hosts numbered 0, 1, ... in order of their first member. Empty: the flat ring, when every
// member is on one host, when no host has two members (the hierarchy would not help), when the
// group has more than kMaxDpHostIndex members, or when an entry has no host label. Every member
// of a group gets the same list, so all make the same choice. O(min(dp, kMaxDpHostIndex)).
//   dp=4, hosts a b a b -> {0, 1, 0, 1};  a a a a -> {};  a b c d -> {}
std::vector<int> DpHostIndex(const Placement& whole, const ParallelLayout& layout, int rank);

// "dp0 pp1 tp1".
std::string RankLabel(const RankAssignment& rank);

// "rank 3 (worker w4 at 127.0.0.1:7074, dp1 pp0 tp1)"; "rank 3 (dp1 pp0 tp1)" for an entry
// without a worker (a rank this worker was not told about: not one of its PeerRanks); "rank 3"
// outside the placement.
std::string DescribeRank(const Placement& placement, int rank);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_RANKS_H_
