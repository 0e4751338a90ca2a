#include "worker/parallel/seal_watch.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::parallel {
namespace {

// No rank sends a step -1: a receive of it starts only when the peer is gone.
const comm::MessageKey kNeverSent = comm::MessageKey::Activation(-1, -1);

}  // namespace

absl::Status WatchSealPeers(comm::Transport& transport, absl::Span<const int> peers) {
  RETURN_IF_ERROR(comm::WatchPeers(transport, peers));
  for (int peer : peers) {
    if (peer == transport.rank()) continue;
    if (transport.Arrived(peer, kNeverSent)) {
      return absl::CancelledError(
          absl::StrCat(transport.PeerName(peer), " left the run (closed its stream)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::parallel
