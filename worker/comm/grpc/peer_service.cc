#include "worker/comm/grpc/peer_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "worker/comm/grpc/frame_codec.h"

namespace dtrain::comm {
namespace {

class IncomingStream : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  IncomingStream(HelloHandler* handler, grpc::CallbackServerContext* context)
      : handler_(handler), context_(context) {
    StartRead(&buffer_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (inbox_ != nullptr) {
        inbox_->Fail(absl::UnavailableError(
            context_->IsCancelled()
                ? "its stream to this rank broke (the peer died or the network failed)"
                : "it closed its stream to this rank"));
      }
      Finish(grpc::Status::OK);
      return;
    }
    absl::Status status = Handle();
    if (!status.ok()) {
      if (inbox_ != nullptr) inbox_->Fail(status);
      Finish(ToGrpcStatus(status));
      return;
    }
    StartRead(&buffer_);
  }

  void OnWriteDone(bool /*ok*/) override {}
  void OnDone() override { delete this; }

 private:
  absl::Status Handle() {
    absl::StatusOr<DecodedFrame> frame = DecodeFrame(buffer_);
    if (!frame.ok()) return frame.status();
    const PeerFrameHeader& h = frame->header;
    if (inbox_ == nullptr) {
      if (h.type() != HELLO) {
        return absl::FailedPreconditionError("the first frame of a stream must be a HELLO");
      }
      absl::StatusOr<Inbox*> inbox = handler_->Accept(h);
      if (!inbox.ok()) return inbox.status();
      inbox_ = *inbox;
      PeerFrameHeader ack;
      ack.set_type(HELLO_ACK);
      ack_ = EncodeFrame(ack, grpc::Slice());
      StartWrite(&ack_);
      return absl::OkStatus();
    }
    if (h.type() != DATA) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected frame type ", h.type()));
    }
    absl::StatusOr<Frame> f = InboxFrame(*std::move(frame));
    if (!f.ok()) return f.status();
    inbox_->Deliver(*std::move(f));
    return absl::OkStatus();
  }

  HelloHandler* handler_;
  grpc::CallbackServerContext* context_;
  grpc::ByteBuffer buffer_;
  grpc::ByteBuffer ack_;
  Inbox* inbox_ = nullptr;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* PeerServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  return new IncomingStream(handler_, context);
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
