#include "worker/comm/grpc/send_ops.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace dtrain::comm {
namespace {

// How long a send that gave up waits for its writer to let go of its buffer.
constexpr absl::Duration kReleaseGrace = absl::Seconds(10);

// A send in flight: waits for GrpcSendState, cancels the stream when the deadline passes.
class GrpcSendOp : public SendOp {
 public:
  GrpcSendOp(std::shared_ptr<GrpcSendState> state, OutgoingStream* stream, std::string what,
             absl::Time deadline)
      : state_(std::move(state)), stream_(stream), what_(std::move(what)), deadline_(deadline) {}
  ~GrpcSendOp() override {
    if (!waited_) Wait(deadline_).IgnoreError();
  }

  bool Done() override {
    absl::MutexLock lock(&state_->mu);
    return state_->Done();
  }

  absl::Status Wait(absl::Time deadline) override {
    waited_ = true;
    GrpcSendState& s = *state_;
    auto done = [&s]() ABSL_SHARED_LOCKS_REQUIRED(s.mu) { return s.Done(); };
    {
      absl::MutexLock lock(&s.mu);
      if (s.mu.AwaitWithDeadline(absl::Condition(&done), deadline)) {
        return s.status.ok() ? s.status : Annotate(s.status, what_);
      }
    }
    // The peer takes nothing (stuck, or the network is): give up on it, which also makes gRPC
    // let go of our buffer.
    stream_->Cancel();
    absl::MutexLock lock(&s.mu);
    if (!s.mu.AwaitWithTimeout(absl::Condition(&done), kReleaseGrace)) {
      return absl::InternalError(
          absl::StrCat(what_, ": gRPC still holds the buffer after cancelling the stream"));
    }
    return absl::DeadlineExceededError(
        absl::StrCat(what_, ": not written by the deadline; the stream to the peer was cancelled"));
  }

 private:
  std::shared_ptr<GrpcSendState> state_;
  OutgoingStream* stream_;
  const std::string what_;
  const absl::Time deadline_;
  bool waited_ = false;
};

// A send through a link of the transport's own (the shared-memory ring, the data connections):
// waits for its ShmSender or TlsSender; cancels the stream (which ends the peer, as over gRPC)
// when the deadline passes. `link` names it in errors.
class LinkSendOp : public SendOp {
 public:
  LinkSendOp(std::shared_ptr<LinkSendState> state, OutgoingStream* stream, std::string what,
             const char* link, absl::Time deadline)
      : state_(std::move(state)),
        stream_(stream),
        what_(std::move(what)),
        link_(link),
        deadline_(deadline) {}
  ~LinkSendOp() override {
    if (!waited_) Wait(deadline_).IgnoreError();
  }

  bool Done() override {
    absl::MutexLock lock(&state_->mu);
    return state_->done;
  }

  absl::Status Wait(absl::Time deadline) override {
    waited_ = true;
    LinkSendState& s = *state_;
    auto done = [&s]() ABSL_SHARED_LOCKS_REQUIRED(s.mu) { return s.done; };
    {
      absl::MutexLock lock(&s.mu);
      if (s.mu.AwaitWithDeadline(absl::Condition(&done), deadline)) {
        return s.status.ok() ? s.status : Annotate(s.status, what_);
      }
    }
    // The peer takes nothing: give up on it, as over gRPC.
    s.cancelled.store(true);
    stream_->Cancel();
    absl::MutexLock lock(&s.mu);
    if (!s.mu.AwaitWithTimeout(absl::Condition(&done), kReleaseGrace)) {
      return absl::InternalError(absl::StrCat(what_, ": the writer of ", link_,
                                              " still holds the buffer after cancelling"));
    }
    return absl::DeadlineExceededError(
        absl::StrCat(what_, ": not taken from ", link_,
                     " by the deadline; the stream to the peer was cancelled"));
  }

 private:
  std::shared_ptr<LinkSendState> state_;
  OutgoingStream* stream_;
  const std::string what_;
  const char* link_;
  const absl::Time deadline_;
  bool waited_ = false;
};

}  // namespace

std::unique_ptr<SendOp> MakeGrpcSendOp(std::shared_ptr<GrpcSendState> state, OutgoingStream* stream,
                                       std::string what, absl::Time deadline) {
  return std::make_unique<GrpcSendOp>(std::move(state), stream, std::move(what), deadline);
}

std::unique_ptr<SendOp> MakeLinkSendOp(std::shared_ptr<LinkSendState> state, OutgoingStream* stream,
                                       std::string what, const char* link, absl::Time deadline) {
  return std::make_unique<LinkSendOp>(std::move(state), stream, std::move(what), link, deadline);
}

}  // namespace dtrain::comm
