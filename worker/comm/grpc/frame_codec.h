// The wire form of a PeerFrame (proto/peer.proto) without copying payloads: the header is
// serialized (it is small) and the payload travels as its own grpc::Slice, on both sides.
//
//   grpc::ByteBuffer wire = EncodeFrame(header, payload_slice);  // payload not copied
//   ASSIGN_OR_RETURN(DecodedFrame frame, DecodeFrame(wire));     // payload: views into slices
//
// Encoding: field 1 (the header) then field 2 (the payload, left out when empty), as protobuf
// would write a PeerFrame. Decoding accepts exactly that order.
#ifndef DTRAIN_WORKER_COMM_GRPC_FRAME_CODEC_H_
#define DTRAIN_WORKER_COMM_GRPC_FRAME_CODEC_H_

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/peer.pb.h"
#include "worker/comm/inbox.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {

// The header of a DATA frame: bytes [offset, offset + payload) of a message of `total` bytes;
// `meta` goes on the first frame only (pass null for the others).
PeerFrameHeader DataHeader(const MessageKey& key, int64_t offset, int64_t total,
                           const TensorMeta* meta);
MessageKey KeyFromHeader(const PeerFrameHeader& header);
// InvalidArgument for an unknown element type.
absl::StatusOr<TensorMeta> MetaFromHeader(const PeerFrameHeader& header);

// `payload` may be an empty slice (no field 2 is written).
grpc::ByteBuffer EncodeFrame(const PeerFrameHeader& header, const grpc::Slice& payload);

struct DecodedFrame {
  PeerFrameHeader header;
  std::vector<grpc::Slice> slices;  // the received bytes; `payload` points into them
  absl::InlinedVector<absl::Span<const std::byte>, 4> payload;

  int64_t payload_size() const;
};

// Takes the buffer's slices (no copy; `buffer` is left empty). InvalidArgument for a malformed
// frame.
absl::StatusOr<DecodedFrame> DecodeFrame(grpc::ByteBuffer& buffer);

// The inbox frame of a DATA frame's header, without payload: key, offset, total, and the meta on
// the frame at offset 0. InvalidArgument for another frame type or an unknown element type.
absl::StatusOr<Frame> FrameOfHeader(const PeerFrameHeader& header);

// The inbox frame of a decoded DATA frame (the peer service delivers it): key, offset, total and
// payload from the wire, the meta on the frame at offset 0 (InvalidArgument for an unknown
// element type); its owner keeps the received slices alive. The inbox checks the numbers
// against what the receive expects.
absl::StatusOr<Frame> InboxFrame(DecodedFrame decoded);

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_GRPC_FRAME_CODEC_H_
