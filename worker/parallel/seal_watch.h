// The seal's watch of the other ranks: what rank 0's checkpoint writer asks while it waits for
// their entries files (CheckpointWriterOptions::peers_failed, checkpoint_writer.h).
//
// A rank publishes the entries of every step it wrote before its run ends cleanly (its trainer
// finishes its writer first, then the worker closes the transport: GOODBYE). So a rank whose
// stream broke will never publish (it failed), and a rank that left cleanly publishes nothing
// more unless its writer is finishing right now (its run was stopped). A peer that left and then
// died looks, to the transport, like one that left: it must not count as alive, or the seal
// would wait out seal_timeout for entries that cannot come.
//
//   Unavailable/Aborted/...  the first peer that failed (comm::WatchPeers): the seal fails now
//   Cancelled                this rank was stopped, or the first peer that left cleanly: the
//                            writer waits a second more for the entries, then gives up
//   OK                       every peer is still in the run
#ifndef DTRAIN_WORKER_PARALLEL_SEAL_WATCH_H_
#define DTRAIN_WORKER_PARALLEL_SEAL_WATCH_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/comm/transport.h"

namespace dtrain::parallel {

// `peers`: the ranks whose entries the seal waits for (never this rank). A peer has left when a
// receive from it would fail at once (Transport::Arrived of a key no rank sends) while its
// status is OK; a transport that cannot tell answers Arrived true, so every peer would look
// gone: the real ones (gRPC, in-process) can tell.
absl::Status WatchSealPeers(comm::Transport& transport, absl::Span<const int> peers);

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_SEAL_WATCH_H_
