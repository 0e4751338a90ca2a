// Ring all-gather: the second half of the ring all-reduce (allreduce_ring.cc), steps
// n-1 .. 2n-3. Member r starts by sending its own segment r to the right; in each step it
// receives segment (r - s - 2) from the left, stores it, and forwards it chunk by chunk as the
// chunks arrive. After n-1 steps every segment has gone once around the ring. Each member sends
// and receives (n-1)/n of the data.
#include "worker/comm/collectives/all_gather.h"

#include "absl/strings/str_cat.h"
#include "worker/comm/collectives/allreduce_ring.h"

namespace dtrain::comm {

absl::Status AllGather(Group& group, absl::Span<float> data) {
  if (group.size() == 1 || data.empty()) return absl::OkStatus();
  const int n = group.size();
  CollectiveOp c(group, absl::StrCat("all-gather of ", data.size(), " floats"));
  return c.Finish(internal::RunRing(c, data, n - 1, 2 * n - 2, ReduceOp::kSum /* unused */));
}

}  // namespace dtrain::comm
