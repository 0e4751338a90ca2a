// Pipelined chain broadcast. The members, in ring order starting at the root, form a chain
// root -> root+1 -> ... -> root-1. The root sends its data in chunks to the next member; every
// other member receives chunk j from the one before it and, unless it ends the chain, forwards
// the chunk at once, while chunk j+1 is still arriving. All links of the chain are busy
// together, so the time is about (bytes + (n-2) * chunk) / link bandwidth rather than
// log2(n) * bytes / bandwidth for a tree.
#include "worker/comm/collectives/broadcast.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::comm {

namespace {

absl::Status Chain(CollectiveOp& op, absl::Span<float> data, int root,
                   std::vector<SendHandle>& sends) {
  Group& group = op.group();
  const int n = group.size();
  const int pos = (group.index() - root + n) % n;  // place in the chain
  const int prev = (group.index() - 1 + n) % n;
  const int next = (group.index() + 1) % n;
  const int64_t chunk = std::max<int64_t>(1, group.options().chunk_bytes / 4);
  const int chunks = static_cast<int>((data.size() + chunk - 1) / chunk);
  for (int j = 0; j < chunks; ++j) {
    absl::Span<float> part = data.subspan(j * chunk, chunk);  // subspan clips the last one
    // Everyone but the root receives chunk j from the previous member.
    if (pos > 0) {
      std::byte* out = reinterpret_cast<std::byte*>(part.data());
      RETURN_IF_ERROR(
          op.Recv(prev, j, part.size(), [out](int64_t offset, absl::Span<const std::byte> piece) {
            std::memcpy(out + offset, piece.data(), piece.size());
          }));
    }
    // Everyone but the end of the chain passes it on.
    if (pos < n - 1) {
      ASSIGN_OR_RETURN(SendHandle h, op.Send(next, j, part));
      sends.push_back(std::move(h));
    }
  }
  for (SendHandle& h : sends) RETURN_IF_ERROR(op.Wait(h));
  return absl::OkStatus();
}

}  // namespace

absl::Status Broadcast(Group& group, absl::Span<float> data, int root) {
  const int n = group.size();
  if (root < 0 || root >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast in ", group.Describe(), ": root index ", root));
  }
  if (n == 1 || data.empty()) return absl::OkStatus();
  CollectiveOp op(group, absl::StrCat("broadcast of ", data.size(), " floats from member ", root));
  std::vector<SendHandle> sends;  // outlives Finish (see CollectiveOp::Finish)
  return op.Finish(Chain(op, data, root, sends));
}

}  // namespace dtrain::comm
