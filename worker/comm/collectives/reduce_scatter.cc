// Ring reduce-scatter: the first half of the ring all-reduce (allreduce_ring.cc), steps
// 0 .. n-2. In step s member r sends segment (r - s - 1) to the right and reduces the segment
// (r - s - 2) it receives from the left into its own; a received chunk is forwarded as soon as
// it is reduced. After n-1 steps segment r has passed through every member and member r holds
// it fully reduced. Each member sends and receives (n-1)/n of the data.
#include "worker/comm/collectives/reduce_scatter.h"

#include "absl/strings/str_cat.h"
#include "worker/comm/collectives/allreduce_ring.h"

namespace dtrain::comm {

absl::Status ReduceScatter(Group& group, absl::Span<float> data, ReduceOp op) {
  if (group.size() == 1 || data.empty()) return absl::OkStatus();
  CollectiveOp c(group,
                 absl::StrCat("reduce-scatter ", ReduceOpName(op), " of ", data.size(), " floats"));
  return c.Finish(internal::RunRing(c, data, 0, group.size() - 1, op));
}

}  // namespace dtrain::comm
