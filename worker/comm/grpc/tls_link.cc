// TlsSender and TlsReceiver of grpc/tls_link.h: frames striped over a peer pair's data
// connections and put back in order (the connections themselves: tls_connection.cc).
#include "worker/comm/grpc/tls_link.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/comm/grpc/frame_codec.h"

namespace dtrain::comm {
namespace {

// A part smaller than this is not split further across connections.
constexpr int64_t kMinPartBytes = 64 << 10;
constexpr uint32_t kMaxHeaderBytes = 64 << 10;
constexpr uint64_t kMaxPayloadBytes = 64 << 20;
// Frames a connection's reader may hold, read but not yet its turn.
constexpr int kReadAheadFrames = 2;
// Before every frame, inside TLS (little-endian: both ends are x86-64 or aarch64 Linux).
struct FramePrefix {
  uint64_t seq;  // the frame's number among the frames to this peer
  uint32_t header_bytes;
  uint32_t reserved;
  uint64_t payload_bytes;
};
// A received frame's payload, handed to the inbox with the frame.
class PayloadBuffer : public FrameOwner {
 public:
  explicit PayloadBuffer(size_t size) : bytes(new std::byte[size]) {}
  std::unique_ptr<std::byte[]> bytes;
};

}  // namespace

// --- TlsSender ---

struct TlsSender::Message {
  std::string owned;
  std::shared_ptr<LinkSendState> state;
  int pending = 0;  // pieces not yet written; guarded by the sender's mu_
  absl::Status status;
};

TlsSender::TlsSender(std::vector<std::unique_ptr<DataConnection>> connections,
                     OutgoingStream* stream, int64_t frame_bytes)
    : stream_(stream), frame_bytes_(frame_bytes), lanes_(connections.size()) {
  for (size_t i = 0; i < lanes_.size(); ++i) lanes_[i].connection = std::move(connections[i]);
  for (size_t i = 0; i < lanes_.size(); ++i) {
    lanes_[i].thread = std::thread([this, i] { Run(static_cast<int>(i)); });
  }
}

TlsSender::~TlsSender() { Stop(); }

std::shared_ptr<LinkSendState> TlsSender::Enqueue(const MessageKey& key, const TensorMeta& meta,
                                                  absl::Span<const std::byte> data,
                                                  std::string owned) {
  auto message = std::make_shared<Message>();
  message->state = std::make_shared<LinkSendState>();
  message->owned = std::move(owned);
  if (!message->owned.empty()) {
    data = {reinterpret_cast<const std::byte*>(message->owned.data()), message->owned.size()};
  }
  const int64_t total = data.size();
  const int64_t lanes = lanes_.size();
  // Parts of about total / K, so that every connection carries one of a message alone.
  const int64_t part = std::min(
      frame_bytes_, std::max(kMinPartBytes, (total + lanes - 1) / std::max<int64_t>(lanes, 1)));
  const int64_t frames = std::max<int64_t>(1, (total + part - 1) / part);
  std::shared_ptr<LinkSendState> state = message->state;
  absl::MutexLock lock(&mu_);
  if (!broken_.ok() || stop_) {
    state->Finish(!broken_.ok() ? broken_ : absl::CancelledError("the transport was shut down"));
    return state;
  }
  message->pending = static_cast<int>(frames);
  std::string header;
  for (int64_t i = 0, offset = 0; i < frames; ++i, offset += part) {
    const int64_t len = std::min(part, total - offset);
    DataHeader(key, offset, total, offset == 0 ? &meta : nullptr).SerializeToString(&header);
    const uint64_t seq = next_seq_++;
    const FramePrefix prefix{seq, static_cast<uint32_t>(header.size()), 0,
                             static_cast<uint64_t>(len)};
    Piece piece;
    piece.head.assign(reinterpret_cast<const char*>(&prefix), sizeof(prefix));
    piece.head += header;
    piece.payload = data.subspan(offset, len);
    piece.message = message;
    lanes_[seq % lanes].queue.push_back(std::move(piece));
  }
  return state;
}

void TlsSender::Finished(Message& message, const absl::Status& status) {
  if (!status.ok() && message.status.ok()) message.status = status;
  if (--message.pending == 0) message.state->Finish(message.status);
}

void TlsSender::Break(const absl::Status& why) {
  if (broken_.ok()) broken_ = why;
  for (Lane& lane : lanes_) {
    for (Piece& piece : lane.queue) Finished(*piece.message, why);
    lane.queue.clear();
    lane.connection->Abort();
  }
}

void TlsSender::Run(int index) {
  Lane& lane = lanes_[index];
  while (true) {
    Piece piece;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, &lane]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !lane.queue.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (lane.queue.empty()) return;  // stopped
      piece = std::move(lane.queue.front());
      lane.queue.pop_front();
      lane.writing = true;
    }
    LinkSendState& state = *piece.message->state;
    auto check = [this, &state]() -> absl::Status {
      if (state.cancelled.load()) return absl::CancelledError("the send gave up");
      {
        absl::MutexLock lock(&mu_);
        if (stop_) return absl::CancelledError("the transport was shut down");
      }
      return stream_->status();
    };
    absl::Status s = lane.connection->Write(piece.head.data(), piece.head.size(), check,
                                            /*more=*/true);
    if (s.ok()) s = lane.connection->Write(piece.payload.data(), piece.payload.size(), check);
    absl::MutexLock lock(&mu_);
    lane.writing = false;
    Finished(*piece.message, s);
    if (!s.ok()) Break(s);  // a frame half-written: nothing more can follow on this link
  }
}

bool TlsSender::Drain(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    auto written = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      if (!broken_.ok()) return true;
      for (const Lane& lane : lanes_) {
        if (!lane.queue.empty() || lane.writing) return false;
      }
      return true;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&written), deadline) || !broken_.ok()) {
      return false;
    }
    stop_ = true;  // the writers are idle: they end
  }
  for (Lane& lane : lanes_) {
    if (lane.thread.joinable()) lane.thread.join();
  }
  bool answered = true;
  for (Lane& lane : lanes_) answered = lane.connection->Close(deadline) && answered;
  return answered;
}

void TlsSender::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    for (Lane& lane : lanes_) {
      for (Piece& piece : lane.queue) {
        Finished(*piece.message,
                 absl::CancelledError("the transport was shut down before sending it"));
      }
      lane.queue.clear();
      lane.connection->Abort();
    }
  }
  for (Lane& lane : lanes_) {
    if (lane.thread.joinable()) lane.thread.join();
  }
}

// --- TlsReceiver ---

TlsReceiver::~TlsReceiver() { Stop(); }

absl::Status TlsReceiver::Add(std::unique_ptr<DataConnection> connection, int index, int count) {
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::CancelledError("the transport is shutting down");
  if (count_ == 0 && count >= 1 && count <= 64) {
    count_ = count;
    connections_.resize(count);
    held_.assign(count, 0);
  }
  if (count != count_ || index < 0 || index >= count_ || connections_[index] != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("data connection ", index, " of ", count,
                                                   " does not fit this peer's ", count_,
                                                   " connections"));
  }
  DataConnection* c = connection.get();
  connections_[index] = std::move(connection);
  threads_.emplace_back([this, index, count, c] { Run(index, count, c); });
  return absl::OkStatus();
}

void TlsReceiver::Stop() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    stopping_.store(true);
    for (auto& c : connections_) {
      if (c != nullptr) c->Abort();
    }
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

absl::Status TlsReceiver::ReadFrame(DataConnection& c, uint64_t want_seq, Frame* frame) {
  auto check = [this]() -> absl::Status {
    return stopping_.load() ? absl::CancelledError("stopped") : absl::OkStatus();
  };
  FramePrefix prefix;
  RETURN_IF_ERROR(c.Read(&prefix, sizeof(prefix), check));
  if (prefix.seq != want_seq || prefix.header_bytes > kMaxHeaderBytes ||
      prefix.payload_bytes > kMaxPayloadBytes) {
    return absl::DataLossError(absl::StrCat(
        "its data connection carries a malformed frame (number ", prefix.seq, ", expected ",
        want_seq, ", header ", prefix.header_bytes, " bytes, payload ", prefix.payload_bytes, ")"));
  }
  std::string header(prefix.header_bytes, '\0');
  RETURN_IF_ERROR(c.Read(header.data(), header.size(), check));
  PeerFrameHeader h;
  absl::StatusOr<Frame> f =
      h.ParseFromString(header)
          ? FrameOfHeader(h)
          : absl::DataLossError("its data connection carries a header that does not parse");
  if (!f.ok()) return absl::DataLossError(f.status().message());
  if (prefix.payload_bytes > 0) {
    auto payload = std::make_unique<PayloadBuffer>(prefix.payload_bytes);
    RETURN_IF_ERROR(c.Read(payload->bytes.get(), prefix.payload_bytes, check));
    f->pieces.push_back(absl::MakeConstSpan(payload->bytes.get(), prefix.payload_bytes));
    f->owner = std::move(payload);
  }
  *frame = *std::move(f);
  return absl::OkStatus();
}

void TlsReceiver::Run(int index, int count, DataConnection* connection) {
  for (uint64_t seq = index;; seq += count) {
    Frame frame;
    absl::Status read = ReadFrame(*connection, seq, &frame);
    if (absl::IsOutOfRange(read)) {  // close_notify: answered once its frames were delivered
      absl::MutexLock lock(&mu_);
      auto delivered = [this, index]()
                           ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || held_[index] == 0; };
      mu_.Await(absl::Condition(&delivered));
      if (!stop_) connection->AnswerClose();
      return;
    }
    if (!read.ok()) {
      if (!stopping_.load()) inbox_->Fail(read);
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      // Its turn, or room to hold it until then: a connection whose thread is descheduled
      // holds up the others only after kReadAheadFrames each.
      auto room = [this, index, seq]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || next_seq_ == seq || held_[index] < kReadAheadFrames;
      };
      mu_.Await(absl::Condition(&room));
      if (stop_) return;
      if (next_seq_ != seq) {  // whoever delivers the frame before it delivers it
        ready_.emplace(seq, std::move(frame));
        ++held_[index];
        continue;
      }
    }
    // In the order of the frames' numbers, which is the order the sender sent them in: this
    // one, then those other connections read ahead. A waiting receive consumes them here.
    while (true) {
      inbox_->Deliver(std::move(frame));
      absl::MutexLock lock(&mu_);
      ++next_seq_;
      auto next = ready_.find(next_seq_);
      if (next == ready_.end()) break;
      frame = std::move(next->second);
      --held_[next_seq_ % count];
      ready_.erase(next);
    }
  }
}

}  // namespace dtrain::comm
