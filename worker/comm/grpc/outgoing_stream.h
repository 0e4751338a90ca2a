// OutgoingStream: this rank's one Connect stream to one peer (the client side of PeerService),
// carrying HELLO and then DATA frames. Frames queue here and gRPC writes them one after another
// (the callback API allows one write in flight), so a send's frames are pipelined: the next is
// handed over as soon as the previous one is written, while the peer reads and consumes earlier
// ones.
//
// A send completes when gRPC has written all of its frames and released every payload slice
// (slices point into the caller's buffer, see GrpcSendState). When the stream breaks, queued
// frames are dropped and their sends fail with Unavailable naming the peer.
//
// Lifetime: owned by the transport; it must stay alive until OnDone. The stream holds the call
// open (a gRPC "hold") from Start until Close, so OnDone never races a Start* call of ours.
#ifndef DTRAIN_WORKER_COMM_GRPC_OUTGOING_STREAM_H_
#define DTRAIN_WORKER_COMM_GRPC_OUTGOING_STREAM_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/client_callback.h"
#include "proto/peer.pb.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {

// What one send is waiting for.
struct GrpcSendState {
  absl::Mutex mu;
  int unwritten ABSL_GUARDED_BY(mu) = 0;    // frames gRPC has not finished writing
  int unreleased ABSL_GUARDED_BY(mu) = 0;   // payload slices gRPC still references
  absl::Status status ABSL_GUARDED_BY(mu);  // first failure

  bool Done() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return unwritten == 0 && unreleased == 0; }
  void FrameFinished(const absl::Status& s);
};

// A zero-copy slice over `data` that tells `state` when gRPC lets go of it.
grpc::Slice PayloadSlice(absl::Span<const std::byte> data, std::shared_ptr<GrpcSendState> state);

class OutgoingStream : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `on_broken` runs once, on a gRPC thread, if the stream ends with an error; `on_left`
  // instead when it ends after the peer's GOODBYE (it left the job cleanly: proto/peer.proto).
  // Either way queued and later sends fail. Errors do not name the peer (callers add it).
  OutgoingStream(std::shared_ptr<grpc::Channel> channel,
                 std::function<void(const absl::Status&)> on_broken,
                 std::function<void(const absl::Status&)> on_left);

  // Sends `hello` and waits for the peer's HELLO_ACK. Unavailable (or the peer's refusal, e.g.
  // FailedPrecondition for a wrong rank or job, PermissionDenied for a secret not its run's)
  // when not acknowledged by `deadline`; the stream is then finished.
  absl::Status Start(const PeerFrameHeader& hello, absl::Time deadline);

  // Queues frames that belong to `state` (whose unwritten count includes them).
  absl::Status Enqueue(std::vector<grpc::ByteBuffer> frames, std::shared_ptr<GrpcSendState> state);

  // Breaks the stream now (a send missed its deadline): queued sends fail.
  void Cancel();
  // Half-closes after the queued frames are written and waits for the end of the call until
  // `deadline`, then cancels. Returns false if gRPC never reported the end (the object must
  // then be leaked, not deleted).
  bool Close(absl::Time deadline);

  absl::Status status() const;
  // The peer's HELLO_ACK (after Start succeeded).
  PeerFrameHeader ack() const;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnWritesDoneDone(bool ok) override {}
  void OnDone(const grpc::Status& status) override;

 private:
  struct Item {
    grpc::ByteBuffer buffer;
    std::shared_ptr<GrpcSendState> state;  // null for HELLO
  };

  // The stream cannot carry more frames: drops the queued ones (all but one being written),
  // failing their sends, and tells the transport (unless closing).
  void Break(const std::string& why);
  // Ends our hold on the call (see Start), after which gRPC may run OnDone; waits for OnDone
  // until `deadline`, then cancels and waits a little more.
  bool Release(absl::Time deadline);

  std::shared_ptr<grpc::Channel> channel_;
  std::function<void(const absl::Status&)> on_broken_;
  std::function<void(const absl::Status&)> on_left_;
  grpc::ClientContext context_;
  grpc::ByteBuffer read_buffer_;

  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);  // front: being written when writing_
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  int starting_ ABSL_GUARDED_BY(mu_) = 0;  // Enqueue calls between unlock and StartWrite
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool acked_ ABSL_GUARDED_BY(mu_) = false;
  PeerFrameHeader ack_ ABSL_GUARDED_BY(mu_);
  bool left_ ABSL_GUARDED_BY(mu_) = false;  // the peer said GOODBYE
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_GRPC_OUTGOING_STREAM_H_
