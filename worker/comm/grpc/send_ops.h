#ifndef DTRAIN_WORKER_COMM_GRPC_SEND_OPS_H_
#define DTRAIN_WORKER_COMM_GRPC_SEND_OPS_H_

// The SendOps GrpcTransport hands out: each waits for its send's state to say done, and when the
// deadline passes first, cancels the stream to the peer (which ends the peer's inbox, as a
// broken connection would) and waits a bounded grace for the writer to let go of the buffer.

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "worker/comm/grpc/outgoing_stream.h"
#include "worker/comm/grpc/shm_link.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {

// A send on the gRPC stream itself (`state` is released when gRPC lets go of the slices).
std::unique_ptr<SendOp> MakeGrpcSendOp(std::shared_ptr<GrpcSendState> state, OutgoingStream* stream,
                                       std::string what, absl::Time deadline);

// A send through a link of the transport's own (the shared-memory ring, the data connections):
// `state` is its ShmSender's or TlsSender's; `link` names the link in errors.
std::unique_ptr<SendOp> MakeLinkSendOp(std::shared_ptr<LinkSendState> state, OutgoingStream* stream,
                                       std::string what, const char* link, absl::Time deadline);

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_GRPC_SEND_OPS_H_
