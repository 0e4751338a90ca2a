// Placement: which worker runs each rank of a job. A pure function of its arguments (no clock,
// no registry), so it is tested directly; the layers of each rank, the stage costs and each
// rank's memory come from the job's plan (plan/job_plan.h), the one place they are decided.
//
// Vocabulary: a job has dp * pp * tp ranks; a "tp group" is the tp ranks of one (dp, pp) pair,
// which exchange activations every layer and so want one host.
#ifndef DTRAIN_PLAN_PLACEMENT_H_
#define DTRAIN_PLAN_PLACEMENT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace dtrain::plan {

struct PlacementResult {
  Placement placement;
  // tp groups whose workers span more than one host label (0 when every group fits on a host).
  int split_tp_groups = 0;
};

// A worker placement may use: the worker as it registered (shared with whoever keeps it, e.g. the
// coordinator's registry: never copied) and the memory it may be given now, which placement reads
// instead of worker->device().memory_bytes() (0: unknown, taken to fit anything).
// `host`: a number that stands for worker->host_label() (equal labels, equal numbers), so that
// grouping 50,000 workers by host reads no string; numbers small enough to index a vector.
struct Candidate {
  std::shared_ptr<const WorkerInfo> worker;
  int64_t memory_bytes = 0;
  uint32_t host = 0;
};

// Places a job's plan (plan::MakeJobPlan) on `idle_workers`.
//
// Ranks are listed in (dp, pp, tp) order. Workers are taken host by host: host labels ordered by
// idle workers (most first, then by label), workers within a host by worker_id. First every host
// with >= tp idle workers gives as many whole tp groups as it can; only when that is not enough
// are the remaining groups made from leftover workers across hosts (counted in
// split_tp_groups). The result depends only on the set of workers, not their order.
//
// Memory: a rank needs its stage's RankMemory.total; a worker has DeviceInfo.memory_bytes (0:
// unknown, taken to fit). When the placement above puts a rank on a worker too small, the ranks
// are placed by size instead (the largest rank on the largest worker, and so on; tp groups may
// then split across hosts), and when even that fails, ResourceExhausted says which rank does
// not fit: "rank 3 (dp0 pp1 tp1) needs 31.2 GiB; the largest idle worker has 23.4 GiB".
//
// Errors: ResourceExhausted "needs 8 workers, 3 idle" when there are too few, or the memory
// error above; InvalidArgument for a plan without its stages or for duplicate worker ids.
// Cost: O(W + H log H + ranks) for W idle workers on H host labels (the workers of a host are
// sorted only when the host is used); O(W log W) only when memory forces placing by size.
absl::StatusOr<PlacementResult> PlaceJob(const JobPlan& plan,
                                         absl::Span<const WorkerInfo> idle_workers);
// The same over candidates, whose worker ids the caller guarantees distinct (not checked: a
// registry's are): what the coordinator's scheduler places with, without copying a worker.
absl::StatusOr<PlacementResult> PlaceJobOnCandidates(const JobPlan& plan,
                                                     absl::Span<const Candidate> idle);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_PLACEMENT_H_
