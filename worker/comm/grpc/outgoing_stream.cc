#include "worker/comm/grpc/outgoing_stream.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "worker/comm/grpc/frame_codec.h"

namespace dtrain::comm {
namespace {

constexpr char kConnectMethod[] = "/dtrain.PeerService/Connect";
// How long to wait for gRPC to report the end of a cancelled call.
constexpr absl::Duration kDoneGrace = absl::Seconds(10);

void ReleasePayload(void* user) {
  auto* state = static_cast<std::shared_ptr<GrpcSendState>*>(user);
  {
    absl::MutexLock lock(&(*state)->mu);
    --(*state)->unreleased;
  }
  delete state;
}

}  // namespace

void GrpcSendState::FrameFinished(const absl::Status& s) {
  absl::MutexLock lock(&mu);
  --unwritten;
  if (!s.ok() && status.ok()) status = s;
}

grpc::Slice PayloadSlice(absl::Span<const std::byte> data, std::shared_ptr<GrpcSendState> state) {
  {
    absl::MutexLock lock(&state->mu);
    ++state->unreleased;
  }
  // gRPC only reads the bytes; the slice API takes a non-const pointer.
  return grpc::Slice(const_cast<std::byte*>(data.data()), data.size(), &ReleasePayload,
                     new std::shared_ptr<GrpcSendState>(std::move(state)));
}

OutgoingStream::OutgoingStream(std::shared_ptr<grpc::Channel> channel,
                               std::function<void(const absl::Status&)> on_broken,
                               std::function<void(const absl::Status&)> on_left)
    : channel_(std::move(channel)),
      on_broken_(std::move(on_broken)),
      on_left_(std::move(on_left)) {}

absl::Status OutgoingStream::Start(const PeerFrameHeader& hello, absl::Time deadline) {
  const absl::Time start = absl::Now();
  // Wait inside the call for the connection (the peer may still be starting); the deadline
  // below bounds it.
  context_.set_wait_for_ready(true);
  grpc::GenericStub stub(channel_);
  stub.PrepareBidiStreamingCall(&context_, kConnectMethod, grpc::StubOptions(), this);
  grpc::ByteBuffer* first;
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(Item{EncodeFrame(hello, grpc::Slice()), nullptr});
    writing_ = true;
    first = &queue_.front().buffer;
  }
  AddHold();
  StartRead(&read_buffer_);
  StartWrite(first);
  StartCall();
  {
    absl::MutexLock lock(&mu_);
    auto answered = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return acked_ || broken_; };
    mu_.AwaitWithDeadline(absl::Condition(&answered), deadline);
    if (acked_ && !broken_) return absl::OkStatus();
  }
  Break(absl::StrCat("no answer to HELLO within ", absl::FormatDuration(deadline - start),
                     " (not started, or unreachable)"));
  context_.TryCancel();
  Release(absl::Now());
  absl::MutexLock lock(&mu_);
  const auto code = final_status_.error_code();
  if (done_ && code == grpc::StatusCode::PERMISSION_DENIED) {
    failure_ = absl::PermissionDeniedError(absl::StrCat(
        "the peer refused this rank's job secret (it serves another run, or this rank was not "
        "placed in its run): ",
        final_status_.error_message()));
  } else if (done_ && (code == grpc::StatusCode::FAILED_PRECONDITION ||
                       code == grpc::StatusCode::INVALID_ARGUMENT ||
                       code == grpc::StatusCode::ALREADY_EXISTS)) {
    // The peer answered, and refused.
    failure_ = absl::Status(static_cast<absl::StatusCode>(code),
                            absl::StrCat("refused: ", final_status_.error_message()));
  }
  return failure_;
}

absl::Status OutgoingStream::Enqueue(std::vector<grpc::ByteBuffer> frames,
                                     std::shared_ptr<GrpcSendState> state) {
  grpc::ByteBuffer* first = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (broken_) return failure_;
    if (closing_) return absl::CancelledError("the stream is closing");
    for (auto& f : frames) queue_.push_back(Item{std::move(f), state});
    if (!writing_ && !queue_.empty()) {
      writing_ = true;
      ++starting_;
      first = &queue_.front().buffer;  // deque references survive push_back
    }
  }
  if (first != nullptr) {
    StartWrite(first);
    absl::MutexLock lock(&mu_);
    --starting_;
  }
  return absl::OkStatus();
}

void OutgoingStream::OnWriteDone(bool ok) {
  Item finished;
  grpc::ByteBuffer* next = nullptr;
  bool writes_done = false;
  {
    absl::MutexLock lock(&mu_);
    finished = std::move(queue_.front());
    queue_.pop_front();
    if (!ok || broken_) {
      writing_ = false;
    } else if (!queue_.empty()) {
      next = &queue_.front().buffer;
    } else {
      writing_ = false;
      writes_done = closing_;
    }
  }
  if (!ok) Break("a write failed (the peer died or the network failed)");
  if (finished.state != nullptr) finished.state->FrameFinished(ok ? absl::OkStatus() : status());
  if (next != nullptr) {
    StartWrite(next);
  } else if (writes_done) {
    StartWritesDone();
  }
}

void OutgoingStream::OnReadDone(bool ok) {
  if (!ok) {
    // The call is over: the peer ended it (left after its GOODBYE, refused us, shut down, or
    // died).
    Break("the stream broke (the peer died, closed it, or the network failed)");
    return;
  }
  absl::StatusOr<DecodedFrame> frame = DecodeFrame(read_buffer_);
  if (frame.ok() && frame->header.type() == HELLO_ACK) {
    absl::MutexLock lock(&mu_);
    acked_ = true;
    ack_ = frame->header;
  }
  if (frame.ok() && frame->header.type() == GOODBYE) {
    absl::MutexLock lock(&mu_);
    left_ = true;
  }
  StartRead(&read_buffer_);
}

void OutgoingStream::Break(const std::string& why) {
  std::deque<Item> dropped;
  absl::Status failure;
  bool notify, left;
  {
    absl::MutexLock lock(&mu_);
    notify = !broken_ && !closing_;
    broken_ = true;
    left = left_;
    if (failure_.ok()) {
      failure_ = absl::UnavailableError(
          left_ ? "the peer left the job (it closed the stream cleanly after its GOODBYE)" : why);
    }
    failure = failure_;
    auto first_dropped = queue_.begin() + (writing_ && !queue_.empty() ? 1 : 0);
    std::move(first_dropped, queue_.end(), std::back_inserter(dropped));
    queue_.erase(first_dropped, queue_.end());
  }
  for (Item& item : dropped) {
    if (item.state != nullptr) item.state->FrameFinished(failure);
  }
  dropped.clear();  // releases the payload slices we held
  if (notify && left && on_left_) {
    on_left_(failure);
  } else if (notify && on_broken_) {
    on_broken_(failure);
  }
}

void OutgoingStream::OnDone(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  done_ = true;
  final_status_ = status;
}

void OutgoingStream::Cancel() {
  Break("stream cancelled after a send missed its deadline");
  context_.TryCancel();
}

bool OutgoingStream::Release(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (released_) {
      auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_; };
      return mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
    }
    released_ = true;
  }
  RemoveHold();
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_; };
  {
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) return true;
  }
  context_.TryCancel();
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&done), kDoneGrace);
}

bool OutgoingStream::Close(absl::Time deadline) {
  bool writes_done;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    auto no_starts = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return starting_ == 0; };
    mu_.Await(absl::Condition(&no_starts));  // StartWrite calls return at once
    // When a write is in flight, OnWriteDone half-closes after the last queued frame.
    writes_done = !writing_ && !broken_ && !released_;
  }
  if (writes_done) StartWritesDone();
  return Release(deadline);
}

PeerFrameHeader OutgoingStream::ack() const {
  absl::MutexLock lock(&mu_);
  return ack_;
}

absl::Status OutgoingStream::status() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

}  // namespace dtrain::comm
