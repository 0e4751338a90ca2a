#include "worker/comm/inbox.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrain::comm {
namespace {

// How often a receive with a watch looks at the watched peers.
constexpr absl::Duration kWatchInterval = absl::Milliseconds(20);

}  // namespace

int64_t Frame::size() const {
  int64_t n = 0;
  for (const auto& piece : pieces) n += piece.size();
  return n;
}

std::string Inbox::peer_name() const {
  absl::MutexLock lock(&mu_);
  return peer_name_;
}

void Inbox::set_peer_name(std::string name) {
  absl::MutexLock lock(&mu_);
  peer_name_ = std::move(name);
}

// A receive in progress. `busy` while some thread runs its sink (at most one at a time, so
// pieces reach the sink in order).
struct Inbox::Waiter {
  MessageKey key;
  const TensorMeta* expected;
  int64_t total;
  PieceSink sink;
  int64_t received = 0;
  bool started = false;
  bool busy = false;
  bool done = false;
};

absl::Status Inbox::CheckNextLocked(const Waiter& w, const Frame& f) const {
  if (!w.started) {
    if (f.offset != 0 || f.meta != *w.expected || f.total_bytes != w.total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "receiving ", w.key.ToString(), " from ", peer_name_, ": got ", f.meta.ToString(), " (",
          f.total_bytes, " bytes at offset ", f.offset, "), expected ", w.expected->ToString()));
    }
  } else if (f.offset != w.received || f.total_bytes != w.total) {
    return absl::DataLossError(absl::StrCat(
        "receiving ", w.key.ToString(), " from ", peer_name_, ": frame at offset ", f.offset,
        " of ", f.total_bytes, " bytes, expected offset ", w.received, " of ", w.total));
  }
  if (f.offset + f.size() > w.total) {
    return absl::DataLossError(absl::StrCat("receiving ", w.key.ToString(), " from ", peer_name_,
                                            ": frame of ", f.size(), " bytes at offset ", f.offset,
                                            " overruns ", w.total, " bytes"));
  }
  return absl::OkStatus();
}

void Inbox::FeedUnlocked(Waiter& w, Frame frame) {
  w.busy = true;
  w.started = true;
  const int64_t size = frame.size();
  mu_.Unlock();
  int64_t offset = frame.offset;
  for (const auto& piece : frame.pieces) {
    w.sink(offset, piece);
    offset += piece.size();
  }
  { Frame released(std::move(frame)); }  // release the bytes before relocking
  mu_.Lock();
  w.received += size;
  w.busy = false;
  w.done = w.received == w.total;
  arrived_.SignalAll();
}

void Inbox::Deliver(Frame frame) {
  Deliver(std::move(frame), [](Frame&) {});
}

void Inbox::Deliver(Frame frame, absl::FunctionRef<void(Frame&)> before_queue) {
  absl::MutexLock lock(&mu_);
  if (frame.key.kind == MessageKind::kAbort) {
    std::string why;
    for (const auto& piece : frame.pieces) {
      why.append(reinterpret_cast<const char*>(piece.data()), piece.size());
    }
    if (failure_.ok()) {
      failure_ = absl::AbortedError(absl::StrCat(peer_name_, " gave up: ", why));
    }
    arrived_.SignalAll();
    return;
  }
  for (Waiter* w : waiters_) {
    if (w->key != frame.key || w->busy || w->done) continue;
    // Only the very next frame of the waiting receive, with nothing of its key queued before.
    if (FindLocked(frame.key) == frames_.end() && CheckNextLocked(*w, frame).ok()) {
      FeedUnlocked(*w, std::move(frame));
      return;
    }
    break;
  }
  before_queue(frame);
  frames_.push_back(std::move(frame));
  arrived_.SignalAll();
}

void Inbox::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (failure_.ok() && closed_.ok()) failure_ = status;
  arrived_.SignalAll();
}

void Inbox::Close(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (closed_.ok() && failure_.ok()) closed_ = status;
  arrived_.SignalAll();
}

absl::Status Inbox::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

int Inbox::Retract(const void* tag) {
  std::deque<Frame> dropped;  // destroyed outside the lock: owners may run callbacks
  absl::MutexLock lock(&mu_);
  for (auto it = frames_.begin(); it != frames_.end();) {
    if (it->tag == tag) {
      dropped.push_back(std::move(*it));
      it = frames_.erase(it);
    } else {
      ++it;
    }
  }
  return static_cast<int>(dropped.size());
}

bool Inbox::Arrived(const MessageKey& key) const {
  absl::MutexLock lock(&mu_);
  if (!failure_.ok() || !closed_.ok()) return true;
  for (const Frame& f : frames_) {
    if (f.key == key) return true;
  }
  return false;
}

std::deque<Frame>::iterator Inbox::FindLocked(const MessageKey& key) {
  for (auto it = frames_.begin(); it != frames_.end(); ++it) {
    if (it->key == key) return it;
  }
  return frames_.end();
}

absl::Status Inbox::CheckAbortLocked(const MessageKey& key) {
  for (const Frame& f : frames_) {
    if (f.key.kind != key.kind || f.key.group != key.group ||
        f.key.part != MessageKey::kAbortPart || f.key.seq > key.seq) {
      continue;
    }
    std::string why;
    for (const auto& piece : f.pieces) {
      why.append(reinterpret_cast<const char*>(piece.data()), piece.size());
    }
    return absl::AbortedError(absl::StrCat("receiving ", key.ToString(), " from ", peer_name_,
                                           ": it gave up on op ", f.key.seq, ": ", why));
  }
  return absl::OkStatus();
}

absl::Status Inbox::CheckOrderLocked(const MessageKey& key) {
  for (const Frame& f : frames_) {
    if (f.key.kind != key.kind || f.key.group != key.group) continue;
    if (f.key == key) return absl::OkStatus();
    if (f.key.seq != key.seq) {  // a mismatched collective (sequence numbers of one group)
      return absl::InvalidArgumentError(absl::StrCat(
          "receiving ", key.ToString(), " from ", peer_name_, ": sequence mismatch: the peer sent ",
          f.key.ToString(), " first (this rank is at op ", key.seq, " of group ", key.group,
          ", the peer at op ", f.key.seq, ": the ranks called different collectives)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "receiving ", key.ToString(), " from ", peer_name_, ": the peer sent ", f.key.ToString(),
        " first (the ranks disagree on the order or size of collectives)"));
  }
  return absl::OkStatus();
}

std::string Inbox::DescribeQueueLocked() const {
  std::vector<std::string> keys;
  int more = 0;
  for (const Frame& f : frames_) {
    if (f.offset != 0) continue;
    if (keys.size() < 4) {
      keys.push_back(absl::StrCat(f.key.ToString(), " ", f.meta.ToString()));
    } else {
      ++more;
    }
  }
  if (keys.empty()) return "nothing else queued from that peer";
  return absl::StrCat("queued from that peer instead: ", absl::StrJoin(keys, "; "),
                      more ? absl::StrCat(" and ", more, " more") : "");
}

absl::Status Inbox::Receive(const MessageKey& key, const TensorMeta& expected, PieceSink sink,
                            absl::Time deadline, RecvOrder order,
                            const std::function<absl::Status()>& watch,
                            const std::function<void(absl::Time)>& pump) {
  const absl::Time start = absl::Now();
  absl::Time next_watch = start + kWatchInterval;
  Waiter w{key, &expected, expected.num_bytes(), sink};
  absl::MutexLock lock(&mu_);
  waiters_.push_back(&w);
  auto finish = [&](absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Never leave while a delivering thread runs our sink: it writes to the caller's memory.
    while (w.busy) arrived_.WaitWithTimeout(&mu_, absl::Milliseconds(10));
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &w));
    return status;
  };
  while (!w.done) {
    if (w.busy) {  // a delivering thread is feeding us
      arrived_.WaitWithTimeout(&mu_, absl::Milliseconds(10));
      continue;
    }
    auto it = FindLocked(key);
    if (it != frames_.end()) {
      absl::Status next = CheckNextLocked(w, *it);
      if (!next.ok()) return finish(next);
      Frame frame = std::move(*it);
      frames_.erase(it);
      FeedUnlocked(w, std::move(frame));
      continue;
    }
    if (order == RecvOrder::kInOrder) {
      absl::Status s = CheckAbortLocked(key);
      if (s.ok() && !w.started) s = CheckOrderLocked(key);
      if (!s.ok()) return finish(s);
    }
    if (const absl::Status& gone = failure_.ok() ? closed_ : failure_; !gone.ok()) {
      return finish(absl::Status(gone.code(), absl::StrCat("receiving ", key.ToString(), " from ",
                                                           peer_name_, ": ", gone.message())));
    }
    if (absl::Now() >= deadline) {
      return finish(absl::DeadlineExceededError(
          absl::StrCat("receiving ", key.ToString(), " ", expected.ToString(), " from ", peer_name_,
                       ": ", w.started ? "the rest of the message" : "nothing", " arrived within ",
                       absl::FormatDuration(deadline - start), " (", w.received, " of ", w.total,
                       " bytes); ", DescribeQueueLocked())));
    }
    if (pump) {  // wait by consuming the peer's ring here: a frame for us reaches the sink now
      mu_.Unlock();
      pump(std::min(deadline, absl::Now() + kWatchInterval));
      mu_.Lock();
      if (!watch || absl::Now() < next_watch) continue;
    } else if (!watch) {
      arrived_.WaitWithDeadline(&mu_, deadline);
      continue;
    } else {
      arrived_.WaitWithDeadline(&mu_, std::min(deadline, absl::Now() + kWatchInterval));
    }
    next_watch = absl::Now() + kWatchInterval;
    mu_.Unlock();  // `watch` may look at other inboxes
    absl::Status watched = watch();
    mu_.Lock();
    // (This peer's own failure is reported as such at the top of the loop.)
    if (!watched.ok() && failure_.ok() && !w.done && !w.busy && FindLocked(key) == frames_.end()) {
      return finish(
          absl::Status(watched.code(), absl::StrCat("receiving ", key.ToString(), " from ",
                                                    peer_name_, ": ", watched.message())));
    }
  }
  return finish(absl::OkStatus());
}

}  // namespace dtrain::comm
