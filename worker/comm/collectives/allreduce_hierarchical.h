// Hierarchical all-reduce: for a group whose members sit on several hosts, reduce inside each
// host (over shared memory: grpc/shm_link.h), all-reduce across hosts among one leader per host
// (the network), then broadcast back inside each host. Only one member per host puts bytes on
// the network, and each host's traffic across it is the data's size, whatever the number of
// ranks on the host (a flat ring crosses hosts as often as there are host boundaries in it).
//
//   ASSIGN_OR_RETURN(HierarchicalAllReduce dp,
//                    HierarchicalAllReduce::Create(&dp_group, hosts, /*local_id=*/9,
//                                                  /*leaders_id=*/10));
//   RETURN_IF_ERROR(dp.Run(absl::MakeSpan(grads, n), ReduceOp::kMean));
//
// Chosen from the placement: `hosts[i]` is the host of member i (the placement's host of the
// worker); with one host, or one member per host, Run is the flat ring (AllReduce), which is
// then as good. The host label only picks the algorithm: which bytes go through shared memory
// is decided by the transport's handshake, never by the label.
//
// Results: kSum, kMin and kMax equal the flat ring's whenever the reduction is exact (closed
// forms; float addition in another order may round differently otherwise); kMean sums at every
// level and divides by the group's size once, at the end, as the ring does.
#ifndef DTRAIN_WORKER_COMM_COLLECTIVES_ALLREDUCE_HIERARCHICAL_H_
#define DTRAIN_WORKER_COMM_COLLECTIVES_ALLREDUCE_HIERARCHICAL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/comm/collectives/group.h"
#include "worker/comm/reduce.h"

namespace dtrain::comm {

class HierarchicalAllReduce {
 public:
  // `group` must outlive the result. `local_id` and `leaders_id`: the ids of the per-host group
  // and of the leaders' group, the same on every member and distinct from every other group's
  // id among these ranks. InvalidArgument when `hosts` does not name every member.
  static absl::StatusOr<HierarchicalAllReduce> Create(Group* group,
                                                      const std::vector<std::string>& hosts,
                                                      int32_t local_id, int32_t leaders_id);

  // True when Run goes through the hierarchy (several hosts, one of them with several members).
  bool hierarchical() const { return hierarchical_; }
  // Every member ends with op(x_0, ..., x_{n-1}), in place; errors as AllReduce's.
  absl::Status Run(absl::Span<float> data, ReduceOp op);

 private:
  HierarchicalAllReduce() = default;
  Group* group_ = nullptr;
  bool hierarchical_ = false;
  std::unique_ptr<Group> local_;    // this rank's host; its member 0 is the host's leader
  std::unique_ptr<Group> leaders_;  // one member per host; only on leaders
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_COLLECTIVES_ALLREDUCE_HIERARCHICAL_H_
