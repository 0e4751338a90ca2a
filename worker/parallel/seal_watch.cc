#include "worker/parallel/seal_watch.h"

namespace dtrain::parallel {
namespace {

// No rank sends a step -1: a receive of it starts only when the peer is gone.
const comm::MessageKey kNeverSent = comm::MessageKey::Activation(-1, -1);

}  // namespace

std::string FirstPeerLeft(comm::Transport& transport, absl::Span<const int> peers) {
  for (int peer : peers) {
    if (peer == transport.rank() || !transport.PeerStatus(peer).ok()) continue;  // failed
    if (transport.Arrived(peer, kNeverSent)) return transport.PeerName(peer);
  }
  return "";
}

}  // namespace dtrain::parallel
