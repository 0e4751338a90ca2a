#include "worker/comm/inproc/inproc_transport.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace dtrain::comm {
namespace {

// How long a send that gave up waits for a receiver already copying one of its frames.
constexpr absl::Duration kReleaseGrace = absl::Seconds(10);

std::string RankName(int rank) { return absl::StrCat("rank ", rank); }

// The frames of one send that the receiver has not consumed yet; shared by the send and its
// frames, so a frame outliving a send that gave up touches nothing freed.
struct Pending {
  absl::Mutex mu;
  int frames ABSL_GUARDED_BY(mu) = 0;
};

class InprocSendOp : public SendOp {
 public:
  InprocSendOp(Inbox* inbox, std::string what)
      : inbox_(inbox), what_(std::move(what)), pending_(std::make_shared<Pending>()) {}
  ~InprocSendOp() override {
    if (!waited_) Wait(absl::Now()).IgnoreError();
  }

  const std::shared_ptr<Pending>& pending() const { return pending_; }

  bool Done() override {
    absl::MutexLock lock(&pending_->mu);
    return pending_->frames == 0;
  }

  absl::Status Wait(absl::Time deadline) override {
    waited_ = true;
    Pending& p = *pending_;
    auto done = [&p]() ABSL_SHARED_LOCKS_REQUIRED(p.mu) { return p.frames == 0; };
    {
      absl::MutexLock lock(&p.mu);
      if (p.mu.AwaitWithDeadline(absl::Condition(&done), deadline)) return absl::OkStatus();
    }
    // Take back what the receiver has not started on, then wait for a frame being consumed.
    inbox_->Retract(this);
    absl::MutexLock lock(&p.mu);
    if (!p.mu.AwaitWithTimeout(absl::Condition(&done), kReleaseGrace)) {
      return absl::InternalError(absl::StrCat(what_, ": the receiver still holds the buffer"));
    }
    return absl::DeadlineExceededError(
        absl::StrCat(what_, ": not received by the deadline; the message was withdrawn"));
  }

 private:
  Inbox* inbox_;
  const std::string what_;
  bool waited_ = false;
  std::shared_ptr<Pending> pending_;
};

class OwnedBytes : public FrameOwner {
 public:
  explicit OwnedBytes(std::string bytes) : bytes_(std::move(bytes)) {}
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class FrameRelease : public FrameOwner {
 public:
  explicit FrameRelease(std::shared_ptr<Pending> pending) : pending_(std::move(pending)) {
    absl::MutexLock lock(&pending_->mu);
    ++pending_->frames;
  }
  ~FrameRelease() override {
    absl::MutexLock lock(&pending_->mu);
    --pending_->frames;
  }

 private:
  std::shared_ptr<Pending> pending_;
};

}  // namespace

class InprocTransport : public Transport {
 public:
  InprocTransport(InprocHub* hub, int rank) : hub_(hub), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  std::string PeerName(int peer) const override { return RankName(peer); }

  absl::StatusOr<SendHandle> StartSend(int peer, const MessageKey& key, const TensorMeta& meta,
                                       absl::Span<const std::byte> data,
                                       absl::Time /*deadline*/) override {
    std::string what = absl::StrCat("sending ", key.ToString(), " to ", RankName(peer));
    if (peer < 0 || peer >= size() || peer == rank_) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": no such peer of ", RankName(rank_), " in ", size(), " ranks"));
    }
    if (static_cast<int64_t>(data.size()) != meta.num_bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", data.size(), " bytes for ", meta.ToString()));
    }
    if (killed_.load()) return absl::CancelledError(absl::StrCat(what, ": this rank was killed"));
    if (hub_->transports_[peer]->killed_.load()) {
      return absl::UnavailableError(absl::StrCat(what, ": ", RankName(peer), " is gone"));
    }
    Inbox& inbox = hub_->inbox(peer, rank_);
    auto op = std::make_unique<InprocSendOp>(&inbox, what);
    const int64_t total = data.size();
    const int64_t frame_bytes = std::max<int64_t>(1, hub_->options_.frame_bytes);
    const int64_t piece_bytes = hub_->options_.piece_bytes;
    int64_t offset = 0;
    do {
      Frame frame;
      frame.key = key;
      frame.offset = offset;
      frame.total_bytes = total;
      if (offset == 0) frame.meta = meta;
      const int64_t end = std::min(total, offset + frame_bytes);
      for (int64_t p = offset; p < end;) {
        const int64_t q = piece_bytes > 0 ? std::min(end, p + piece_bytes) : end;
        frame.pieces.push_back(data.subspan(p, q - p));
        p = q;
      }
      frame.owner = std::make_unique<FrameRelease>(op->pending());
      frame.tag = op.get();
      inbox.Deliver(std::move(frame));
      offset = end;
    } while (offset < total);
    return SendHandle(std::move(op));
  }

  absl::Status Post(int peer, const MessageKey& key, std::string payload) override {
    if (peer < 0 || peer >= size() || peer == rank_) {
      return absl::InvalidArgumentError(absl::StrCat("posting to ", RankName(peer)));
    }
    if (killed_.load() || hub_->transports_[peer]->killed_.load()) {
      return absl::UnavailableError(absl::StrCat("posting to ", RankName(peer), ": gone"));
    }
    auto owned = std::make_unique<OwnedBytes>(std::move(payload));
    Frame frame;
    frame.key = key;
    frame.total_bytes = owned->bytes().size();
    frame.meta = TensorMeta::Bytes(frame.total_bytes);
    frame.pieces.push_back(
        {reinterpret_cast<const std::byte*>(owned->bytes().data()), owned->bytes().size()});
    frame.owner = std::move(owned);
    hub_->inbox(peer, rank_).Deliver(std::move(frame));
    return absl::OkStatus();
  }

  absl::Status PeerStatus(int peer) const override {
    if (peer >= 0 && peer < size() && hub_->transports_[peer]->killed_.load()) {
      return absl::UnavailableError(absl::StrCat(RankName(peer), " is gone"));
    }
    return absl::OkStatus();
  }

  absl::Status Recv(int peer, const MessageKey& key, const TensorMeta& expected, PieceSink sink,
                    absl::Time deadline, const RecvOptions& options) override {
    if (peer < 0 || peer >= size() || peer == rank_) {
      return absl::InvalidArgumentError(absl::StrCat("receiving ", key.ToString(), " from ",
                                                     RankName(peer), ": no such peer of ",
                                                     RankName(rank_), " in ", size(), " ranks"));
    }
    if (killed_.load()) {
      return absl::CancelledError(absl::StrCat("receiving ", key.ToString(), " from ",
                                               RankName(peer), ": this rank was killed"));
    }
    std::function<absl::Status()> watch;
    if (!options.watch.empty()) {
      watch = [this, peers = options.watch]() { return WatchPeers(*this, peers); };
    }
    return hub_->inbox(rank_, peer).Receive(key, expected, sink, deadline, options.order, watch);
  }

  bool Arrived(int peer, const MessageKey& key) override {
    if (peer < 0 || peer >= size() || peer == rank_ || killed_.load()) return true;  // Recv fails
    return hub_->inbox(rank_, peer).Arrived(key);
  }

  void Kill() { killed_.store(true); }

 private:
  InprocHub* hub_;
  const int rank_;
  std::atomic<bool> killed_{false};
};

InprocHub::InprocHub(int size, InprocOptions options) : options_(options) {
  for (int receiver = 0; receiver < size; ++receiver) {
    for (int sender = 0; sender < size; ++sender) {
      inboxes_.push_back(std::make_unique<Inbox>(RankName(sender)));
    }
  }
  for (int rank = 0; rank < size; ++rank) {
    transports_.push_back(std::make_unique<InprocTransport>(this, rank));
  }
}

InprocHub::~InprocHub() = default;

Transport* InprocHub::transport(int rank) { return transports_[rank].get(); }

void InprocHub::Kill(int rank) {
  transports_[rank]->Kill();
  for (int other = 0; other < size(); ++other) {
    if (other == rank) continue;
    inbox(other, rank).Fail(absl::UnavailableError(absl::StrCat(RankName(rank), " is gone")));
    inbox(rank, other).Fail(absl::CancelledError(absl::StrCat(RankName(rank), " was killed")));
  }
}

}  // namespace dtrain::comm
