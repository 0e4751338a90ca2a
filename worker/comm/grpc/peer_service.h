// The server side of PeerService: one reactor per incoming Connect stream, and Diagnose (the
// rank's flight recorder, answered at once from the handler). The first frame
// must be a HELLO, which the handler accepts (answering HELLO_ACK) or refuses (the stream ends
// with its status); every DATA frame after it goes, without copying, into the sender's inbox,
// and the next read starts at once, so the peer's frames keep flowing while receivers consume
// earlier ones. When the stream breaks, the inbox fails with Unavailable naming the peer; when
// the peer half-closes it (it left the job cleanly), the inbox is closed (Inbox::Close): what
// it sent is still received, nothing more is waited for, and it does not count as failed.
#ifndef DTRAIN_WORKER_COMM_GRPC_PEER_SERVICE_H_
#define DTRAIN_WORKER_COMM_GRPC_PEER_SERVICE_H_

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_callback.h"
#include "proto/peer.grpc.pb.h"
#include "worker/comm/inbox.h"

namespace dtrain::comm {

class HelloHandler {
 public:
  virtual ~HelloHandler() = default;
  // The inbox for the sender of `hello`, or why it is refused (PermissionDenied: not the run's
  // secret; FailedPrecondition: another job or rank; AlreadyExists: that peer already has a
  // stream).
  // `ack` is the HELLO_ACK to answer; the handler may add to it (a shared-memory ring's name).
  virtual absl::StatusOr<Inbox*> Accept(const PeerFrameHeader& hello, PeerFrameHeader* ack) = 0;
  // The accepted sender `src_rank` answered the ring of its HELLO_ACK (SHM_ATTACHED); an error
  // ends its stream.
  virtual absl::Status Attached(int src_rank, const PeerFrameHeader& attached) {
    return absl::FailedPreconditionError("no shared-memory ring was offered");
  }
  // The accepted sender `src_rank` says whether it opened the data connections its HELLO_ACK
  // offered (DATA_ATTACHED); an error ends its stream.
  virtual absl::Status DataAttached(int src_rank, const PeerFrameHeader& attached) {
    return absl::FailedPreconditionError("no data connections were offered");
  }
  // The accepted stream from `src_rank` ended (its OnDone).
  virtual void Ended(int src_rank) {}
  // This rank's flight recorder, or why not (PermissionDenied: not the run's secret;
  // FailedPrecondition: another job; Unimplemented: no recorder). Must not block.
  virtual absl::StatusOr<RankDiagnosis> Diagnose(const DiagnoseRankRequest& request) {
    return absl::UnimplementedError("this rank keeps no flight recorder");
  }
};

class IncomingStream;

class PeerServiceImpl final
    : public PeerService::WithCallbackMethod_Diagnose<
          PeerService::WithRawCallbackMethod_Connect<PeerService::Service>> {
 public:
  explicit PeerServiceImpl(HelloHandler* handler) : handler_(handler) {}
  ~PeerServiceImpl() override;

  // This rank leaves cleanly (its transport shuts down with a grace period): every incoming
  // stream gets a GOODBYE (proto/peer.proto) and ends; waits until they did or `deadline`.
  // Call before stopping the server, whose shutdown cancels what is left.
  void SayGoodbye(absl::Time deadline);
  // An incoming stream ended (its OnDone).
  void Forget(IncomingStream* stream);

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Connect(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Diagnose(grpc::CallbackServerContext* context,
                                     const DiagnoseRankRequest* request,
                                     RankDiagnosis* response) override;

 private:
  HelloHandler* handler_;
  absl::Mutex mu_;
  absl::flat_hash_set<IncomingStream*> streams_ ABSL_GUARDED_BY(mu_);  // until their OnDone
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_GRPC_PEER_SERVICE_H_
