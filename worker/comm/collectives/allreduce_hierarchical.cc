// Three phases (the header has why):
//   1. inside each host, a ring all-reduce of the host's members (shared memory);
//   2. across hosts, a ring all-reduce of the leaders (member 0 of each host's group);
//   3. inside each host, the leader broadcasts the result (a pipelined chain).
// Sum, min and max keep their op at every level; mean sums at every level and divides once.
#include "worker/comm/collectives/allreduce_hierarchical.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/comm/collectives/allreduce_ring.h"
#include "worker/comm/collectives/broadcast.h"

namespace dtrain::comm {

absl::StatusOr<HierarchicalAllReduce> HierarchicalAllReduce::Create(
    Group* group, const std::vector<std::string>& hosts, int32_t local_id, int32_t leaders_id) {
  if (static_cast<int>(hosts.size()) != group->size()) {
    return absl::InvalidArgumentError(absl::StrCat(hosts.size(), " hosts for the ", group->size(),
                                                   " members of ", group->Describe()));
  }
  // Members by host, in group order; hosts in order of their first member.
  std::vector<std::vector<int>> by_host;
  absl::flat_hash_map<std::string, int> host_index;
  for (int i = 0; i < group->size(); ++i) {
    auto [it, added] = host_index.try_emplace(hosts[i], static_cast<int>(by_host.size()));
    if (added) by_host.emplace_back();
    by_host[it->second].push_back(group->rank_at(i));
  }
  HierarchicalAllReduce h;
  h.group_ = group;
  bool shared_host = false;
  for (const auto& ranks : by_host) shared_host |= ranks.size() > 1;
  h.hierarchical_ = by_host.size() > 1 && shared_host;
  if (!h.hierarchical_) return h;
  const std::vector<int>& mine = by_host[host_index[hosts[group->index()]]];
  ASSIGN_OR_RETURN(Group local,
                   Group::Create(&group->transport(), mine, local_id, group->options()));
  h.local_ = std::make_unique<Group>(std::move(local));
  if (mine.front() == group->transport().rank()) {
    std::vector<int> leaders;
    for (const auto& ranks : by_host) leaders.push_back(ranks.front());
    ASSIGN_OR_RETURN(Group across,
                     Group::Create(&group->transport(), leaders, leaders_id, group->options()));
    h.leaders_ = std::make_unique<Group>(std::move(across));
  }
  return h;
}

absl::Status HierarchicalAllReduce::Run(absl::Span<float> data, ReduceOp op) {
  if (!hierarchical_) return AllReduce(*group_, data, op);
  const ReduceOp level_op = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  // 1. The host's sum (min, max) on every member of the host.
  RETURN_IF_ERROR(AllReduce(*local_, data, level_op));
  // 2. The leaders combine the hosts'.
  if (leaders_ != nullptr) RETURN_IF_ERROR(AllReduce(*leaders_, data, level_op));
  // 3. Back to the host's members.
  RETURN_IF_ERROR(Broadcast(*local_, data, /*root=*/0));
  if (op == ReduceOp::kMean) {
    const float n = static_cast<float>(group_->size());
    for (float& x : data) x /= n;
  }
  return absl::OkStatus();
}

}  // namespace dtrain::comm
