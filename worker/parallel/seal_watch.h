// The seal's watch of the other ranks for a leave: what rank 0's checkpoint writer asks, beside
// their failures (comm::WatchPeers), while it waits for their entries files
// (CheckpointWriterOptions::peer_left, checkpoint_writer.h).
//
// A rank publishes the entries of every step it wrote before its run ends cleanly (its trainer
// finishes its writer first, then the worker closes the transport: GOODBYE). A rank that left
// cleanly therefore publishes nothing more: its entries are there already (visible at once on
// one host, within a shared file system's caching on several) or never coming (it was stopped
// mid-write, and may have died since). The transport keeps such a peer's PeerStatus OK (it did
// not fail), so without this watch the seal would wait out seal_timeout for it.
#ifndef DTRAIN_WORKER_PARALLEL_SEAL_WATCH_H_
#define DTRAIN_WORKER_PARALLEL_SEAL_WATCH_H_

#include <string>

#include "absl/types/span.h"
#include "worker/comm/transport.h"

namespace dtrain::parallel {

// The name (Transport::PeerName) of the first of `peers` that is gone although its status is
// OK: it left the run cleanly; "" when every one is still in it. A peer is gone when a receive
// from it would fail at once (Transport::Arrived of a key no rank sends). A transport that
// cannot tell answers Arrived true and every peer would look gone: gRPC and in-process can tell.
std::string FirstPeerLeft(comm::Transport& transport, absl::Span<const int> peers);

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_SEAL_WATCH_H_
