#include "worker/comm/grpc/shm_link.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/comm/grpc/frame_codec.h"

namespace dtrain::comm {
namespace {

// A frame's header serialized is well below this; the payload gets the rest of half the ring.
constexpr int64_t kHeaderAllowance = 1024;
// How long a wait inside the ring sleeps before looking at the stream (and the stop flag) again.
constexpr absl::Duration kPoll = absl::Milliseconds(5);
// How long the reader thread leaves the ring to receives after the last one ended, and how often
// it looks again meanwhile: the gap between a collective's receives is microseconds, between a
// pipeline's steps a whole compute. 1 ms woke each rank's reader 1000 times a second during an
// all-reduce (613 context switches per 16 MiB all-reduce of 4 ranks instead of 169, load 13).
constexpr absl::Duration kReaderIdle = absl::Milliseconds(5);

// A frame's bytes copied out of the ring (nobody was waiting for it yet).
class CopiedFrame : public FrameOwner {
 public:
  explicit CopiedFrame(int64_t size) : bytes(size) {}
  std::vector<std::byte> bytes;
};

}  // namespace

const char* DataPathName(DataPath path) {
  switch (path) {
    case DataPath::kNone:
      return "none";
    case DataPath::kGrpc:
      return "grpc";
    case DataPath::kSharedMemory:
      return "shared memory";
    case DataPath::kTlsSockets:
      return "tls sockets";
  }
  return "unknown";
}

ShmSender::ShmSender(std::unique_ptr<ShmRing> ring, OutgoingStream* stream)
    : ring_(std::move(ring)), stream_(stream), thread_([this] { Run(); }) {}

ShmSender::~ShmSender() { Stop(); }

std::shared_ptr<LinkSendState> ShmSender::Enqueue(const MessageKey& key, const TensorMeta& meta,
                                                  absl::Span<const std::byte> data,
                                                  std::string owned) {
  auto state = std::make_shared<LinkSendState>();
  Job job{key, meta, data, std::move(owned), state};
  const absl::Span<const std::byte> bytes = Bytes(job);
  {
    absl::MutexLock lock(&mu_);
    if (stop_) {
      state->Finish(absl::CancelledError("the transport was shut down"));
      return state;
    }
    if (!queue_.empty() || writing_ ||
        static_cast<int64_t>(bytes.size()) > ring_->max_payload_bytes(kHeaderAllowance)) {
      queue_.push_back(std::move(job));
      return state;
    }
    writing_ = true;  // the writer thread waits
  }
  // A message of one frame that fits now (a collective's chunk, usually) goes into the ring on
  // the caller's thread: no hand-over to the writer thread, whose wake-up costs more than the
  // copy on a busy machine.
  absl::StatusOr<bool> written = false;
  if (absl::Status broken = stream_->status(); !broken.ok()) {
    written = broken;
  } else {
    std::string header;
    DataHeader(key, 0, bytes.size(), &meta).SerializeToString(&header);
    written = ring_->TryWrite(
        absl::MakeConstSpan(reinterpret_cast<const std::byte*>(header.data()), header.size()),
        bytes);
  }
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!written.ok()) {
    state->Finish(written.status());
  } else if (*written) {
    state->Finish(absl::OkStatus());
  } else if (stop_) {
    state->Finish(absl::CancelledError("the transport was shut down before sending it"));
  } else {
    queue_.push_front(std::move(job));  // before what others queued meanwhile
  }
  return state;
}

absl::Span<const std::byte> ShmSender::Bytes(const Job& job) {
  if (job.owned.empty()) return job.data;
  return {reinterpret_cast<const std::byte*>(job.owned.data()), job.owned.size()};
}

absl::Status ShmSender::Write(const Job& job) {
  const absl::Span<const std::byte> data = Bytes(job);
  const int64_t total = data.size();
  const int64_t frame_bytes = ring_->max_payload_bytes(kHeaderAllowance);
  // A stuck receiver is bounded by the caller's deadline (it cancels, and the stream breaks).
  auto check = [&]() -> absl::Status {
    if (job.state->cancelled.load()) return absl::CancelledError("the send gave up");
    if (stopping_.load()) return absl::CancelledError("the transport was shut down");
    return stream_->status();
  };
  std::string header;
  int64_t offset = 0;
  do {
    const int64_t len = std::min(frame_bytes, total - offset);
    DataHeader(job.key, offset, total, offset == 0 ? &job.meta : nullptr)
        .SerializeToString(&header);
    RETURN_IF_ERROR(ring_->Write(
        absl::MakeConstSpan(reinterpret_cast<const std::byte*>(header.data()), header.size()),
        data.subspan(offset, len), absl::InfiniteFuture(), check, kPoll));
    offset += len;
  } while (offset < total);
  return absl::OkStatus();
}

void ShmSender::Run() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || (!queue_.empty() && !writing_);
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopped
      job = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    job.state->Finish(Write(job));
    absl::MutexLock lock(&mu_);
    writing_ = false;
  }
}

bool ShmSender::Drain(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    auto written = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return queue_.empty() && !writing_; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&written), deadline)) return false;
  }
  return ring_->WaitDrained(deadline, [this] { return stream_->status(); });
}

void ShmSender::Stop() {
  std::deque<Job> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    dropped.swap(queue_);
  }
  stopping_.store(true);
  for (Job& job : dropped) {
    job.state->Finish(absl::CancelledError("the transport was shut down before sending it"));
  }
  ring_->Wake();
  if (thread_.joinable()) thread_.join();
}

ShmReceiver::ShmReceiver(std::unique_ptr<ShmRing> ring, Inbox* inbox)
    : ring_(std::move(ring)), inbox_(inbox), thread_([this] { Run(); }) {}

ShmReceiver::~ShmReceiver() { Stop(); }

void ShmReceiver::Stop() {
  stop_.store(true);
  {
    absl::MutexLock lock(&idle_mu_);
    idle_cv_.SignalAll();
  }
  ring_->Wake();
  if (thread_.joinable()) thread_.join();
}

void ShmReceiver::Corrupt(const absl::Status& why) {
  broken_.store(true);
  inbox_->Fail(
      absl::DataLossError(absl::StrCat("its shared-memory ring is corrupt: ", why.message())));
}

bool ShmReceiver::DeliverRecord(const ShmRing::Record& record) {
  PeerFrameHeader h;
  absl::StatusOr<Frame> frame =
      h.ParseFromArray(record.header.data(), record.header.size())
          ? FrameOfHeader(h)
          : absl::DataLossError("a record in the shared-memory ring is not a DATA frame");
  if (!frame.ok()) {  // the peer writes garbage: nothing more from it can be trusted
    Corrupt(frame.status());
    return false;
  }
  Frame& f = *frame;
  if (!record.payload.empty()) f.pieces.push_back(record.payload);
  // Queued rather than consumed at once: copy it out, the ring space is reused.
  inbox_->Deliver(std::move(f), [](Frame& queued) {
    auto copy = std::make_unique<CopiedFrame>(queued.size());
    std::byte* at = copy->bytes.data();
    for (auto& piece : queued.pieces) {
      std::copy(piece.begin(), piece.end(), at);
      piece = absl::MakeConstSpan(at, piece.size());
      at += piece.size();
    }
    queued.owner = std::move(copy);
  });
  ring_->Release();
  return true;
}

void ShmReceiver::Pump(absl::Time until) {
  if (stop_.load() || broken_.load()) {
    absl::SleepFor(std::min(kPoll, until - absl::Now()));  // the inbox says why; do not spin
    return;
  }
  if (consumer_mu_.TryLock()) {
    ShmRing::Record record;
    absl::StatusOr<bool> got =
        ring_->Peek(&record, until, [this] { return stop_.load() || broken_.load(); });
    if (!got.ok()) {
      Corrupt(got.status());
    } else if (*got) {
      DeliverRecord(record);
    }
    consumer_mu_.Unlock();
  } else {
    // The reader thread (or another receive) consumes: make it give up, then let the caller
    // look at its inbox first, since what the other consumer delivered may be what it waits for.
    ring_->WakeConsumer();
    consumer_mu_.Lock();
    consumer_mu_.Unlock();
  }
}

void ShmReceiver::ReceiveBegins() {
  receiving_.fetch_add(1);
  ring_->WakeConsumer();  // a reader thread sleeping in Peek gives up (ReaderYields)
}

void ShmReceiver::ReceiveEnds() {
  last_receive_ns_.store(absl::GetCurrentTimeNanos());
  receiving_.fetch_sub(1);
}

bool ShmReceiver::ReaderYields() const {
  return receiving_.load() > 0 || absl::GetCurrentTimeNanos() - last_receive_ns_.load() <
                                      absl::ToInt64Nanoseconds(kReaderIdle);
}

void ShmReceiver::Run() {
  while (!stop_.load() && !broken_.load()) {
    if (ReaderYields()) {  // receives consume the ring: look again in a while
      absl::MutexLock lock(&idle_mu_);
      if (!stop_.load()) idle_cv_.WaitWithTimeout(&idle_mu_, kReaderIdle);
      continue;
    }
    absl::MutexLock consumer(&consumer_mu_);
    if (ReaderYields()) continue;
    ShmRing::Record record;
    absl::StatusOr<bool> got = ring_->Peek(&record, absl::Now() + absl::Seconds(1), [this] {
      return stop_.load() || receiving_.load() > 0;
    });
    if (!got.ok()) {
      Corrupt(got.status());
      return;
    }
    if (*got && !DeliverRecord(record)) return;
  }
}

}  // namespace dtrain::comm
