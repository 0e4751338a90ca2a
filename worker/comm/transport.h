// Transport: how one worker moves tensors to and from the other workers of its job.
//
// Vocabulary (used throughout worker/comm/):
//   rank     a worker's index in the job, 0..size-1 (ordered dp, pp, tp; see groups.h).
//   peer     another rank this one talks to.
//   message  one tensor sent from one rank to one peer, named by a MessageKey and described by a
//            TensorMeta (element type and shape). A receive names the key and the meta it
//            expects; a message with another shape is an error, never a silent reinterpretation.
//   frame    a piece of a message on the wire (below gRPC's 4 MiB message limit). Frames of a
//            message arrive in order; a receiver sees them as they come ("pieces"), so it can
//            copy or reduce them while later frames are still in flight.
//   group    ranks that run collectives together (collectives/group.h); a chunk is the unit a
//            collective pipelines (one message).
//
// Matching: a receive from peer p for key k takes the oldest message from p with key k;
// messages from one peer with the same key are received in the order they were sent. Messages
// with other keys wait in the peer's inbox (inbox.h) until received. For collectives
// (RecvOrder::kInOrder) a message of the same group with another key at the head of the inbox
// means the ranks disagree about the order of operations: InvalidArgument at once.
//
// Errors (absl::Status; every message names the peer and the key):
//   InvalidArgument   shape or type mismatch, a peer outside [0, size), out-of-order collective
//   DeadlineExceeded  nothing matching arrived (receive) or was taken (send) by the deadline;
//                     the message lists what the peer did send instead, if anything
//   Unavailable       the peer is gone (its stream broke or it shut down), or unreachable
//   Aborted           a collective: the peer gave up on the operation (its error follows)
//   Cancelled         this transport was shut down
//
// Implementations: inproc/ (ranks as threads of one process: unit tests) and grpc/ (one
// bidirectional gRPC stream per ordered pair of ranks).
//
//   // rank 0: x (B,T,C) must stay unchanged until Wait returns
//   const MessageKey key = MessageKey::Activation(step, mb);
//   ASSIGN_OR_RETURN(SendHandle sent, t.StartSend(1, key, TensorMeta::F32({B, T, C}),
//                                                 AsBytes(x), deadline));
//   RETURN_IF_ERROR(sent->Wait(deadline));
//   // rank 1
//   RETURN_IF_ERROR(RecvInto(t, 0, key, TensorMeta::F32({B, T, C}), AsWritableBytes(y), deadline));
#ifndef DTRAIN_WORKER_COMM_TRANSPORT_H_
#define DTRAIN_WORKER_COMM_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace dtrain::comm {

class FlightRecorder;  // flight_recorder.h

enum class MessageKind : int32_t {
  kActivation = 1,  // forward: a stage's output to the next stage
  kGradient = 2,    // backward: the gradient of a stage's input to the previous stage
  kCollective = 3,  // one chunk of a collective operation
  // The sender's run failed and it will send nothing more (payload: its error, as bytes): every
  // receive from it fails at once with Aborted carrying that error (AbortJob).
  kAbort = 4,
};

// Names a message. Activations and gradients fill step, micro_batch and virtual_stage (the
// receiving virtual stage under interleaving, else 0); collectives fill group, seq (operation
// number within the group) and part (message number within the operation).
struct MessageKey {
  MessageKind kind = MessageKind::kCollective;
  int64_t step = 0;
  int32_t micro_batch = 0;
  int32_t virtual_stage = 0;
  int32_t group = 0;
  int64_t seq = 0;
  int32_t part = 0;

  // The part of a collective message that carries a member's failure (its text, as bytes)
  // instead of data: receives of that group from that member then fail with Aborted.
  static constexpr int32_t kAbortPart = -1;

  static MessageKey Activation(int64_t step, int32_t micro_batch, int32_t virtual_stage = 0);
  static MessageKey Gradient(int64_t step, int32_t micro_batch, int32_t virtual_stage = 0);
  static MessageKey Collective(int32_t group, int64_t seq, int32_t part);

  // "activation step=3 mb=1 vs=0", "collective group=7 seq=12 part=3".
  std::string ToString() const;
  friend bool operator==(const MessageKey& a, const MessageKey& b);
  friend bool operator!=(const MessageKey& a, const MessageKey& b) { return !(a == b); }
};

enum class DataType : int32_t { kF32 = 1, kBytes = 2 };
int64_t ElementSize(DataType dtype);

// Element type and shape of a message; its size is the product of the shape times the element
// size (a scalar, shape {}, is one element).
struct TensorMeta {
  DataType dtype = DataType::kF32;
  absl::InlinedVector<int64_t, 4> shape;

  static TensorMeta F32(absl::Span<const int64_t> shape);
  static TensorMeta F32(int64_t count) { return F32(absl::Span<const int64_t>(&count, 1)); }
  static TensorMeta Bytes(int64_t count);

  int64_t num_bytes() const;
  // "f32[4,64,256]".
  std::string ToString() const;
  friend bool operator==(const TensorMeta& a, const TensorMeta& b);
  friend bool operator!=(const TensorMeta& a, const TensorMeta& b) { return !(a == b); }
};

// Receives a message piece by piece, in order of offset: bytes [offset, offset + piece.size())
// of the message. Pieces may split elements (a float across two pieces). Called on the
// receiving thread, never under a transport lock.
using PieceSink = absl::FunctionRef<void(int64_t offset, absl::Span<const std::byte> piece)>;

enum class RecvOrder {
  kAnyOrder,  // point-to-point: other keys from the peer may be ahead in its inbox
  kInOrder,   // collectives: the next message of this group from the peer must have this key
};

struct RecvOptions {
  RecvOrder order = RecvOrder::kAnyOrder;
  // Other peers whose loss also ends the wait, with their failure. Collectives watch their
  // whole group: a member dying anywhere fails every rank linked to it at once, not at the
  // deadline, and the error names the dead member rather than the neighbour waited on.
  absl::Span<const int> watch;
};

// An asynchronous send. The transport may read the sent bytes until Wait returns: do not
// modify or free them before. Wait returns OK once the transport no longer needs the bytes
// (handed to the peer, or to the kernel); on DeadlineExceeded the transport has dropped the
// message (and for gRPC the stream to the peer, since a stuck peer cannot be trusted). A send
// destroyed without Wait waits on its own (bounded, discarding the status).
class SendOp {
 public:
  virtual ~SendOp() = default;
  virtual absl::Status Wait(absl::Time deadline) = 0;
  // True once Wait would return at once (the bytes are no longer needed, or the send failed):
  // lets a caller reuse finished buffers without blocking on the others.
  virtual bool Done() = 0;
};
using SendHandle = std::unique_ptr<SendOp>;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // For error messages: "rank 3" or "rank 3 (10.0.0.7:7003)".
  virtual std::string PeerName(int peer) const = 0;

  // Starts sending `data` (exactly meta.num_bytes() bytes) to `peer`. Does not wait for the
  // peer to receive; may wait up to `deadline` to connect to the peer first.
  virtual absl::StatusOr<SendHandle> StartSend(int peer, const MessageKey& key,
                                               const TensorMeta& meta,
                                               absl::Span<const std::byte> data,
                                               absl::Time deadline) = 0;

  // Sends a small message whose bytes the transport copies and owns (meta Bytes(size)), without
  // waiting, over an existing stream only: Unavailable if the peer was never reached or is gone.
  // For control messages such as a collective's abort.
  virtual absl::Status Post(int peer, const MessageKey& key, std::string payload) = 0;

  // Receives the message `key` from `peer`, which must have the meta `expected`, passing its
  // bytes to `sink` as they arrive. Returns once the whole message went to the sink.
  virtual absl::Status Recv(int peer, const MessageKey& key, const TensorMeta& expected,
                            PieceSink sink, absl::Time deadline,
                            const RecvOptions& options = {}) = 0;

  // Whether a Recv of `key` from `peer` would start at once: the message's first frame is here,
  // or the receive would fail at once (the peer is gone or gave up). Never waits and takes
  // nothing, so a caller can do other ready work instead of blocking in a receive (the
  // pipeline executor); deadlines and aborts stay with Recv. An implementation that cannot
  // tell answers true: the caller then receives, and waits, as before.
  virtual bool Arrived(int peer, const MessageKey& key) { return true; }

  // OK while `peer` is believed alive; once its stream broke or it shut down, the error that
  // receives from it get (Unavailable naming it).
  virtual absl::Status PeerStatus(int peer) const = 0;

  // Where this rank records its operations for `dtrain diagnose` (flight_recorder.h), or null:
  // collectives and the pipeline executor record into it. An ObservedTransport gives one.
  virtual FlightRecorder* recorder() const { return nullptr; }
};

// Tells every other rank that this rank's run failed with `why` and will send nothing more
// (a kAbort message each, best effort): their receives from this rank fail at once with
// Aborted carrying `why`, instead of waiting for their deadlines.
void AbortJob(Transport& transport, const absl::Status& why);

// Blocking helpers: a send that waits for completion; a receive into a buffer of exactly
// expected.num_bytes() bytes.
absl::Status Send(Transport& transport, int peer, const MessageKey& key, const TensorMeta& meta,
                  absl::Span<const std::byte> data, absl::Time deadline);
absl::Status RecvInto(Transport& transport, int peer, const MessageKey& key,
                      const TensorMeta& expected, absl::Span<std::byte> out, absl::Time deadline,
                      const RecvOptions& options = {});

// The first failure among `peers` (Transport::PeerStatus), or OK.
absl::Status WatchPeers(const Transport& transport, absl::Span<const int> peers);

inline absl::Span<const std::byte> AsBytes(absl::Span<const float> v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(float)};
}
inline absl::Span<std::byte> AsWritableBytes(absl::Span<float> v) {
  return {reinterpret_cast<std::byte*>(v.data()), v.size() * sizeof(float)};
}

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_TRANSPORT_H_
