// ShmRing: a single-producer / single-consumer ring of records in a POSIX shared-memory segment
// (/dev/shm), the data path between two ranks on one host (grpc/shm_link.h uses it).
//
// Layout of the segment: a control block (one page: magic, capacity, the creator's nonce, then
// the producer's `head` and the consumer's `tail` on cache lines of their own) followed by
// `capacity` bytes of records. head and tail count bytes ever published / released, so
// head - tail is what the ring holds. A record starts 64-byte aligned:
//   RecordHead {type, header_bytes, payload_bytes} | header | pad to 64 | payload | pad to 64
// and never wraps: a record that does not fit before the end is preceded by a wrap marker that
// fills the rest. A record takes at most capacity / 2 bytes (max_payload_bytes()), so a ring
// that drained always has room for the next one. Messages larger than the ring go as several
// records, one after another.
//
// Waits spin briefly, then sleep on a futex of the segment (shared, not process-private), and
// wake every `poll` to ask the caller's `check` whether to give up (the peer's stream broke, the
// send was cancelled); every wait has a deadline.
//
//   // consumer (receiving rank)
//   ASSIGN_OR_RETURN(std::unique_ptr<ShmRing> ring, ShmRing::Create(4 << 20));
//   // ... tell the producer ring->name() over the authenticated stream; it proves the nonce ...
//   ring->Unlink();
//   ShmRing::Record r;
//   ASSIGN_OR_RETURN(bool got, ring->Peek(&r, deadline));
//   if (got) { use(r.header, r.payload); ring->Release(); }
//   // producer (sending rank)
//   ASSIGN_OR_RETURN(std::unique_ptr<ShmRing> ring, ShmRing::Attach(name));
//   RETURN_IF_ERROR(ring->Write(header, payload, deadline, check));
//
// Thread safety: one producer thread and one consumer thread; Wake from any thread.
#ifndef DTRAIN_WORKER_COMM_SHM_RING_H_
#define DTRAIN_WORKER_COMM_SHM_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/comm/shm/segment.h"

namespace dtrain::comm {

class ShmRing {
 public:
  struct Control;  // the segment's first page (ring.cc)

  struct Record {
    absl::Span<const std::byte> header;
    absl::Span<const std::byte> payload;
  };

  static constexpr int64_t kMinCapacity = 4096;
  static constexpr int kNonceBytes = 32;

  // The consumer creates the segment (segment.h: a fresh random name, mode 0600, pages
  // reserved) of a control page and `capacity` bytes (a multiple of 4096, at least
  // kMinCapacity), with a random nonce. ResourceExhausted when /dev/shm has no room; Unavailable
  // when it cannot be used.
  static absl::StatusOr<std::unique_ptr<ShmRing>> Create(int64_t capacity);
  // The producer opens a segment by name. NotFound: no such segment here (another host, or
  // another /dev/shm); InvalidArgument: not a name of ours, or not a ring of this version.
  static absl::StatusOr<std::unique_ptr<ShmRing>> Attach(const std::string& name);
  ~ShmRing() = default;  // unmaps; unlinks the name if still linked and this side created it

  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;

  const std::string& name() const { return segment_.name(); }
  // The creator's random nonce: a producer that reads it proves it mapped this very segment.
  std::string nonce() const;
  // Removes the name from /dev/shm (both sides keep their mapping). Idempotent.
  void Unlink();
  int64_t capacity() const { return capacity_; }
  // The largest payload one record can carry with a header of `header_bytes`.
  int64_t max_payload_bytes(int64_t header_bytes) const;

  // Producer: appends one record, waiting for room until `deadline` (DeadlineExceeded), calling
  // `check` (if set) every `poll` while waiting and giving up with its error. InvalidArgument
  // for a record larger than max_payload_bytes.
  absl::Status Write(absl::Span<const std::byte> header, absl::Span<const std::byte> payload,
                     absl::Time deadline, const std::function<absl::Status()>& check = nullptr,
                     absl::Duration poll = absl::Milliseconds(5));
  // Producer: appends one record if there is room now (true), else writes nothing (false).
  absl::StatusOr<bool> TryWrite(absl::Span<const std::byte> header,
                                absl::Span<const std::byte> payload);
  // Producer: waits until the consumer released everything written (true), or `deadline`.
  bool WaitDrained(absl::Time deadline, const std::function<absl::Status()>& check = nullptr);

  // Consumer: the oldest unreleased record (views into the ring, valid until Release), waiting
  // until `deadline`, Wake, or `give_up` (if set; asked while spinning and before sleeping)
  // returns true (false: nothing). DataLoss for a malformed record. A thread that wants the
  // consumer's place makes give_up true, then calls WakeConsumer: the waiting Peek returns.
  absl::StatusOr<bool> Peek(Record* record, absl::Time deadline,
                            const std::function<bool()>& give_up = nullptr);
  // Consumer: frees the record Peek returned.
  void Release();

  // Wakes the other side's and this side's sleeping waits (they re-check their conditions).
  void Wake();
  // Wakes a consumer sleeping in Peek (it re-checks its give_up).
  void WakeConsumer();

 private:
  ShmRing(ShmSegment segment, int64_t capacity);
  // Bytes a record takes, including the wrap marker before it if it must wrap (0: too large).
  uint64_t Need(int64_t header_bytes, int64_t payload_bytes, uint64_t head) const;
  bool HasRoom(uint64_t head, uint64_t need) const;
  void Put(absl::Span<const std::byte> header, absl::Span<const std::byte> payload, uint64_t head,
           uint64_t need);

  ShmSegment segment_;
  Control* control_;
  std::byte* data_;
  int64_t capacity_;
  uint64_t peeked_bytes_ = 0;  // consumer: size of the record Peek returned (0: none)
  // Wake and WakeConsumer calls on this side: a sleeping Peek returns only when they bumped it,
  // not whenever its futex returns.
  std::atomic<uint32_t> wakes_{0};
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_SHM_RING_H_
