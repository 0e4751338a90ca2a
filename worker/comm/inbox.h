// Inbox: the frames one rank has received from one peer and not yet handed to a receive, and
// the matching rules of transport.h. Both transports deliver frames into inboxes, so matching,
// deadlines, shape checks and peer failure behave the same in-process and over gRPC.
//
//   Inbox inbox("rank 2 (127.0.0.1:7002)");
//   inbox.Deliver(std::move(frame));                       // transport thread
//   RETURN_IF_ERROR(inbox.Receive(key, meta, sink, deadline, RecvOrder::kAnyOrder));
//
// Thread safety: every method may be called from any thread. At most one Receive per key at a
// time (two receives of one key could each take part of a message).
#ifndef DTRAIN_WORKER_COMM_INBOX_H_
#define DTRAIN_WORKER_COMM_INBOX_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {

// Keeps a frame's bytes alive; destroying it tells the transport the bytes are no longer used
// (a gRPC slice unref, or an in-process send's completion).
class FrameOwner {
 public:
  virtual ~FrameOwner() = default;
};

// Bytes [offset, offset + size()) of a message of total_bytes. `meta` is set on the frame at
// offset 0. `pieces` point into memory `owner` keeps alive.
struct Frame {
  MessageKey key;
  int64_t offset = 0;
  int64_t total_bytes = 0;
  TensorMeta meta;
  absl::InlinedVector<absl::Span<const std::byte>, 4> pieces;
  std::unique_ptr<FrameOwner> owner;
  const void* tag = nullptr;  // identifies the sender's operation, for Retract

  int64_t size() const;
};

class Inbox {
 public:
  explicit Inbox(std::string peer_name) : peer_name_(std::move(peer_name)) {}
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  std::string peer_name() const;
  void set_peer_name(std::string name);

  // Hands a frame to a receive waiting for it, whose sink then runs on this (the delivering)
  // thread while the bytes are hot in its cache; else queues it. Wakes receivers.
  void Deliver(Frame frame);
  // The same; `before_queue` runs (under the lock) on a frame that is queued rather than handed
  // to a waiting receive, so a transport that must reuse the frame's memory (a shared-memory
  // ring) can move its bytes elsewhere first.
  void Deliver(Frame frame, absl::FunctionRef<void(Frame&)> before_queue);

  // The peer is gone: receives that find no matching frame fail with `status` (prefixed with
  // the key and peer). Frames already queued can still be received. The first failure stays.
  void Fail(const absl::Status& status);
  absl::Status failure() const;
  // The peer left cleanly: it closed its stream after its last frame (its job is over). Frames
  // already queued can still be received; a receive that finds none fails at once with
  // `status` (nothing more will come). Unlike Fail, the peer does not count as failed
  // (failure() stays OK): waits on other peers that watch it go on, since a peer that finished
  // is no reason for them to give up. Later Fails are part of the same leaving (our stream to
  // it ends as its server stops) and are ignored; an abort it sent before still counts.
  void Close(const absl::Status& status);

  // Takes the message `key` frame by frame, in order of offset, passing the pieces to `sink`
  // outside the lock: on this thread for queued frames, on the delivering thread for frames
  // that arrive while it waits. Errors as in transport.h; every message names the key and the
  // peer.
  // `watch`, when set, is called (without the lock) every few milliseconds while waiting; a
  // non-OK result ends the receive with that status.
  // `pump`, when set, is how this receive waits for frames: it is called (without the lock)
  // instead of sleeping, delivers frames into this inbox on the calling thread (a shared-memory
  // ring read by the receiving thread itself) and returns after delivering one or at its
  // argument, a time at most a few milliseconds away.
  absl::Status Receive(const MessageKey& key, const TensorMeta& expected, PieceSink sink,
                       absl::Time deadline, RecvOrder order,
                       const std::function<absl::Status()>& watch = nullptr,
                       const std::function<void(absl::Time)>& pump = nullptr);

  // Whether a Receive of `key` would start at once: a frame of it is queued, or the peer failed
  // or left (Transport::Arrived).
  bool Arrived(const MessageKey& key) const;

  // Drops the queued frames whose tag is `tag` (a send that gave up); returns how many.
  int Retract(const void* tag);

 private:
  struct Waiter;
  // OK when `frame` is the next one `w` needs, else the error receiving it gives.
  absl::Status CheckNextLocked(const Waiter& w, const Frame& frame) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `w`'s sink over `frame` with the lock released, then releases the frame.
  void FeedUnlocked(Waiter& w, Frame frame) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next frame of `key` (its first unreceived one), or frames_.end().
  std::deque<Frame>::iterator FindLocked(const MessageKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Aborted when the peer gave up on this or an earlier op of key's group (an abort message).
  absl::Status CheckAbortLocked(const MessageKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // InvalidArgument when the head of the inbox for key's group is another collective.
  absl::Status CheckOrderLocked(const MessageKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DescribeQueueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::string peer_name_ ABSL_GUARDED_BY(mu_);
  absl::CondVar arrived_;
  std::deque<Frame> frames_ ABSL_GUARDED_BY(mu_);      // in order of arrival
  std::vector<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);  // receives in progress
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // Close: the peer left cleanly
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_INBOX_H_
