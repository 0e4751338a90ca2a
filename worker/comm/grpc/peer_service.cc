#include "worker/comm/grpc/peer_service.h"

#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "worker/comm/grpc/frame_codec.h"

namespace dtrain::comm {

// One incoming Connect stream. Alive until gRPC's OnDone and every Ref's Unref; the service
// holds it in its registry until OnDone, so SayGoodbye can reach it.
class IncomingStream : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  IncomingStream(PeerServiceImpl* service, HelloHandler* handler,
                 grpc::CallbackServerContext* context)
      : service_(service), handler_(handler), context_(context) {
    StartRead(&buffer_);
  }

  void Ref() { refs_.fetch_add(1); }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  // This rank leaves cleanly: GOODBYE to the peer (after the HELLO_ACK, if that is still being
  // written), then the end of the stream. Nothing more is read from it.
  void Leave() {
    absl::MutexLock lock(&mu_);
    if (finish_called_ || leaving_) return;
    leaving_ = true;
    // No HELLO yet: nothing to say goodbye to. The HELLO_ACK being written: the GOODBYE
    // follows it (OnWriteDone).
    if (writing_) return;
    if (inbox_ != nullptr) {
      said_goodbye_ = writing_ = true;
      StartWrite(&goodbye_);
    } else {
      FinishLocked(grpc::Status::OK);
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      {
        absl::MutexLock lock(&mu_);
        if (leaving_) return;  // our own GOODBYE ends the stream
      }
      if (inbox_ != nullptr && context_->IsCancelled()) {
        inbox_->Fail(absl::UnavailableError(
            "its stream to this rank broke (the peer died or the network failed)"));
      } else if (inbox_ != nullptr) {
        // A half-close after its last frame: the peer is done, not failed (Inbox::Close).
        inbox_->Close(absl::UnavailableError(
            "it closed its stream to this rank (it left the job) before sending this"));
      }
      FinishOnce(grpc::Status::OK);
      return;
    }
    absl::Status status = Handle();
    if (!status.ok()) {
      if (inbox_ != nullptr) inbox_->Fail(status);
      FinishOnce(ToGrpcStatus(status));
      return;
    }
    StartRead(&buffer_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!leaving_ || finish_called_) return;
    if (!said_goodbye_ && ok) {
      said_goodbye_ = writing_ = true;
      StartWrite(&goodbye_);
    } else {
      FinishLocked(grpc::Status::OK);
    }
  }

  void OnDone() override {
    if (inbox_ != nullptr) handler_->Ended(src_rank_);
    service_->Forget(this);
    Unref();
  }

 private:
  absl::Status Handle() {
    absl::StatusOr<DecodedFrame> frame = DecodeFrame(buffer_);
    if (!frame.ok()) return frame.status();
    const PeerFrameHeader& h = frame->header;
    if (inbox_ == nullptr) {
      if (h.type() != HELLO) {
        return absl::FailedPreconditionError("the first frame of a stream must be a HELLO");
      }
      PeerFrameHeader ack;
      ack.set_type(HELLO_ACK);
      absl::StatusOr<Inbox*> inbox = handler_->Accept(h, &ack);
      if (!inbox.ok()) return inbox.status();
      src_rank_ = h.src_rank();
      ack_ = EncodeFrame(ack, grpc::Slice());
      PeerFrameHeader goodbye;
      goodbye.set_type(GOODBYE);
      goodbye_ = EncodeFrame(goodbye, grpc::Slice());
      absl::MutexLock lock(&mu_);
      inbox_ = *inbox;
      writing_ = true;
      // Leaving already: the GOODBYE follows the ACK (OnWriteDone).
      StartWrite(&ack_);
      return absl::OkStatus();
    }
    if (h.type() == SHM_ATTACHED) return handler_->Attached(src_rank_, h);
    if (h.type() == DATA_ATTACHED) return handler_->DataAttached(src_rank_, h);
    if (h.type() != DATA) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected frame type ", h.type()));
    }
    absl::StatusOr<Frame> f = InboxFrame(*std::move(frame));
    if (!f.ok()) return f.status();
    inbox_->Deliver(*std::move(f));
    return absl::OkStatus();
  }

  void FinishOnce(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }

  // Every StartWrite and the one Finish are issued under mu_, so that no write follows Finish:
  // Leave runs on a thread of ours, and a write it issued after a reaction's Finish could reach
  // gRPC's stream after OnDone freed it. gRPC runs none of this reactor's reactions inline, so
  // holding mu_ across these calls cannot deadlock.
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_called_) return;
    finish_called_ = true;
    Finish(status);
  }

  PeerServiceImpl* service_;
  HelloHandler* handler_;
  grpc::CallbackServerContext* context_;
  std::atomic<int> refs_{1};  // gRPC's, until OnDone
  grpc::ByteBuffer buffer_;
  grpc::ByteBuffer ack_;
  grpc::ByteBuffer goodbye_;
  Inbox* inbox_ = nullptr;  // set once, on the HELLO (reactions run one at a time)
  int src_rank_ = -1;       // the accepted HELLO's sender
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
  bool said_goodbye_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
};

PeerServiceImpl::~PeerServiceImpl() = default;

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* PeerServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  auto* stream = new IncomingStream(this, handler_, context);
  absl::MutexLock lock(&mu_);
  streams_.insert(stream);
  return stream;
}

void PeerServiceImpl::Forget(IncomingStream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

void PeerServiceImpl::SayGoodbye(absl::Time deadline) {
  std::vector<IncomingStream*> streams;
  {
    absl::MutexLock lock(&mu_);
    for (IncomingStream* s : streams_) {
      s->Ref();  // alive while we call it, even if gRPC ends it meanwhile
      streams.push_back(s);
    }
  }
  for (IncomingStream* s : streams) {
    s->Leave();
    s->Unref();
  }
  // Until every stream ended (its GOODBYE written) or the deadline; the server's shutdown
  // cancels what is left.
  absl::MutexLock lock(&mu_);
  auto ended = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return streams_.empty(); };
  mu_.AwaitWithDeadline(absl::Condition(&ended), deadline);
}

grpc::ServerUnaryReactor* PeerServiceImpl::Diagnose(grpc::CallbackServerContext* context,
                                                    const DiagnoseRankRequest* request,
                                                    RankDiagnosis* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<RankDiagnosis> diagnosis = handler_->Diagnose(*request);
  if (diagnosis.ok()) *response = *std::move(diagnosis);
  reactor->Finish(ToGrpcStatus(diagnosis.status()));
  return reactor;
}

}  // namespace dtrain::comm
