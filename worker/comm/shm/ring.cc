#include "worker/comm/shm/ring.h"

#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace dtrain::comm {
namespace {

constexpr uint64_t kMagic = 0x31474e4952687364;  // "dshRING1"
constexpr int64_t kControlBytes = 4096;
constexpr int64_t kAlign = 64;
constexpr uint32_t kRecord = 1;
constexpr uint32_t kWrap = 2;
// Spins before sleeping: a peer on another core usually answers within a few microseconds, and
// a futex round trip costs more than that; on a loaded machine a longer spin only burns a core.
constexpr int kSpins = 200;

struct RecordHead {
  uint32_t type;
  uint32_t header_bytes;
  uint64_t payload_bytes;
};

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
int64_t PayloadOffset(int64_t header_bytes) {
  return AlignUp(static_cast<int64_t>(sizeof(RecordHead)) + header_bytes);
}

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", strerror(errno)); }

using shm::CpuRelax;
using shm::FutexWait;
using shm::FutexWakeAll;

}  // namespace

struct ShmRing::Control {
  std::atomic<uint64_t> magic;  // set last by the creator
  int64_t capacity;
  unsigned char nonce[kNonceBytes];
  alignas(64) std::atomic<uint64_t> head;  // producer: bytes published
  std::atomic<uint32_t> data_seq;          // futex: bumped after every publish
  std::atomic<uint32_t> consumer_sleeping;
  alignas(64) std::atomic<uint64_t> tail;  // consumer: bytes released
  std::atomic<uint32_t> space_seq;         // futex: bumped after every release
  std::atomic<uint32_t> producer_sleeping;
};
static_assert(sizeof(ShmRing::Control) <= kControlBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

ShmRing::ShmRing(ShmSegment segment, int64_t capacity)
    : segment_(std::move(segment)),
      control_(static_cast<Control*>(segment_.base())),
      data_(static_cast<std::byte*>(segment_.base()) + kControlBytes),
      capacity_(capacity) {}

absl::StatusOr<std::unique_ptr<ShmRing>> ShmRing::Create(int64_t capacity) {
  if (capacity < kMinCapacity || capacity % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring capacity ", capacity, ": need a multiple of 4096, at least ", kMinCapacity));
  }
  ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::Create(kControlBytes + capacity));
  std::unique_ptr<ShmRing> ring(new ShmRing(std::move(segment), capacity));
  Control* c = new (ring->segment_.base()) Control();
  c->capacity = capacity;
  if (getrandom(c->nonce, kNonceBytes, 0) != kNonceBytes) {
    return absl::UnavailableError(Errno("getrandom"));
  }
  c->head.store(0);
  c->tail.store(0);
  c->magic.store(kMagic, std::memory_order_release);
  return ring;
}

absl::StatusOr<std::unique_ptr<ShmRing>> ShmRing::Attach(const std::string& name) {
  absl::StatusOr<ShmSegment> segment = ShmSegment::Attach(name, kControlBytes + kMinCapacity);
  RETURN_IF_ERROR(segment.status());
  const Control* c = static_cast<const Control*>(segment->base());
  const uint64_t magic = c->magic.load(std::memory_order_acquire);
  const int64_t capacity = segment->bytes() - kControlBytes;
  if (magic != kMagic || c->capacity != capacity) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is not a ring of this version"));
  }
  return std::unique_ptr<ShmRing>(new ShmRing(*std::move(segment), capacity));
}

std::string ShmRing::nonce() const {
  return std::string(reinterpret_cast<const char*>(control_->nonce), kNonceBytes);
}

void ShmRing::Unlink() { segment_.Unlink(); }

int64_t ShmRing::max_payload_bytes(int64_t header_bytes) const {
  return capacity_ / 2 - PayloadOffset(header_bytes);
}

uint64_t ShmRing::Need(int64_t header_bytes, int64_t payload_bytes, uint64_t head) const {
  if (payload_bytes > max_payload_bytes(header_bytes)) return 0;
  const int64_t size = PayloadOffset(header_bytes) + AlignUp(payload_bytes);
  const int64_t pos = head % capacity_;
  return (capacity_ - pos < size ? capacity_ - pos : 0) + size;
}

bool ShmRing::HasRoom(uint64_t head, uint64_t need) const {
  return capacity_ - (head - control_->tail.load(std::memory_order_acquire)) >= need;
}

void ShmRing::Put(absl::Span<const std::byte> header, absl::Span<const std::byte> payload,
                  uint64_t head, uint64_t need) {
  Control& c = *control_;
  const int64_t size = PayloadOffset(header.size()) + AlignUp(payload.size());
  const int64_t pos = head % capacity_;
  if (static_cast<int64_t>(need) > size) {  // wraps: the rest of the ring is padding
    reinterpret_cast<RecordHead*>(data_ + pos)->type = kWrap;
  }
  std::byte* at = data_ + (head + need - size) % capacity_;
  RecordHead rh{kRecord, static_cast<uint32_t>(header.size()), payload.size()};
  memcpy(at, &rh, sizeof(rh));
  if (!header.empty()) memcpy(at + sizeof(rh), header.data(), header.size());
  if (!payload.empty()) memcpy(at + PayloadOffset(header.size()), payload.data(), payload.size());
  c.head.store(head + need, std::memory_order_release);
  c.data_seq.fetch_add(1);
  if (c.consumer_sleeping.load()) FutexWakeAll(&c.data_seq);
}

absl::StatusOr<bool> ShmRing::TryWrite(absl::Span<const std::byte> header,
                                       absl::Span<const std::byte> payload) {
  const uint64_t head = control_->head.load(std::memory_order_relaxed);  // only we write it
  const uint64_t need = Need(header.size(), payload.size(), head);
  if (need == 0) {
    return absl::InvalidArgumentError(absl::StrCat("a record of ", payload.size(),
                                                   " bytes in a ring of ", capacity_,
                                                   " (at most half of it)"));
  }
  if (!HasRoom(head, need)) return false;
  Put(header, payload, head, need);
  return true;
}

absl::Status ShmRing::Write(absl::Span<const std::byte> header, absl::Span<const std::byte> payload,
                            absl::Time deadline, const std::function<absl::Status()>& check,
                            absl::Duration poll) {
  Control& c = *control_;
  const uint64_t head = c.head.load(std::memory_order_relaxed);  // only we write it
  const uint64_t need = Need(header.size(), payload.size(), head);
  if (need == 0) {
    return absl::InvalidArgumentError(absl::StrCat("a record of ", payload.size(),
                                                   " bytes in a ring of ", capacity_,
                                                   " (at most half of it)"));
  }
  for (int spin = 0; !HasRoom(head, need); ++spin) {
    if (spin < kSpins) {
      CpuRelax();
      continue;
    }
    const uint32_t seen = c.space_seq.load();
    c.producer_sleeping.store(1);
    if (HasRoom(head, need)) {
      c.producer_sleeping.store(0);
      break;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      c.producer_sleeping.store(0);
      return absl::DeadlineExceededError(
          "the receiver took nothing from the shared-memory ring by the deadline");
    }
    FutexWait(&c.space_seq, seen, std::min(deadline, now + poll) - now);
    c.producer_sleeping.store(0);
    if (check) {
      absl::Status s = check();
      if (!s.ok()) return s;
    }
  }
  Put(header, payload, head, need);
  return absl::OkStatus();
}

bool ShmRing::WaitDrained(absl::Time deadline, const std::function<absl::Status()>& check) {
  Control& c = *control_;
  const uint64_t head = c.head.load(std::memory_order_relaxed);
  while (c.tail.load(std::memory_order_acquire) != head) {
    const uint32_t seen = c.space_seq.load();
    c.producer_sleeping.store(1);
    if (c.tail.load() == head) break;
    const absl::Time now = absl::Now();
    if (now >= deadline || (check && !check().ok())) {
      c.producer_sleeping.store(0);
      return false;
    }
    FutexWait(&c.space_seq, seen, std::min(deadline, now + absl::Milliseconds(5)) - now);
  }
  c.producer_sleeping.store(0);
  return true;
}

absl::StatusOr<bool> ShmRing::Peek(Record* record, absl::Time deadline,
                                   const std::function<bool()>& give_up) {
  Control& c = *control_;
  uint64_t tail = c.tail.load(std::memory_order_relaxed);  // only we write it
  for (int spin = 0;; ++spin) {
    const uint64_t head = c.head.load(std::memory_order_acquire);
    if (head != tail) {
      if (head - tail > static_cast<uint64_t>(capacity_)) {
        return absl::DataLossError("the shared-memory ring's head is out of range");
      }
      const int64_t pos = tail % capacity_;
      RecordHead rh;
      memcpy(&rh, data_ + pos, sizeof(rh));
      if (rh.type == kWrap) {  // the rest of the ring is padding: release it, read from 0
        tail += capacity_ - pos;
        c.tail.store(tail, std::memory_order_release);
        continue;
      }
      const int64_t payload_at = PayloadOffset(rh.header_bytes);
      const uint64_t size = payload_at + AlignUp(rh.payload_bytes);
      if (rh.type != kRecord || rh.header_bytes > capacity_ || rh.payload_bytes > capacity_ ||
          size > head - tail || pos + size > static_cast<uint64_t>(capacity_)) {
        return absl::DataLossError(
            absl::StrCat("a malformed record in the shared-memory ring (type ", rh.type, ", ",
                         rh.payload_bytes, " bytes)"));
      }
      record->header = {data_ + pos + sizeof(rh), rh.header_bytes};
      record->payload = {data_ + pos + payload_at, rh.payload_bytes};
      peeked_bytes_ = size;
      return true;
    }
    if (give_up && give_up()) return false;
    if (spin < kSpins) {
      CpuRelax();
      continue;
    }
    const uint32_t wakes = wakes_.load();
    const uint32_t seen = c.data_seq.load();
    c.consumer_sleeping.store(1);
    // After `seen`: a give_up set before WakeConsumer's bump is seen here, or the futex sees
    // the bump and does not sleep.
    if (c.head.load() != tail || (give_up && give_up())) {
      c.consumer_sleeping.store(0);
      continue;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      c.consumer_sleeping.store(0);
      return false;
    }
    FutexWait(&c.data_seq, seen, deadline - now);
    c.consumer_sleeping.store(0);
    // Woken by Wake or WakeConsumer with nothing to read: the caller looks at its conditions.
    // Any other return (a record, the deadline, a signal, or the late FUTEX_WAKE of a record
    // already taken, which a loaded machine delivers into the next wait) goes round again.
    if (wakes_.load() != wakes && c.head.load(std::memory_order_acquire) == tail) return false;
  }
}

void ShmRing::Release() {
  Control& c = *control_;
  c.tail.store(c.tail.load(std::memory_order_relaxed) + peeked_bytes_, std::memory_order_release);
  peeked_bytes_ = 0;
  c.space_seq.fetch_add(1);
  if (c.producer_sleeping.load()) FutexWakeAll(&c.space_seq);
}

void ShmRing::WakeConsumer() {
  wakes_.fetch_add(1);
  control_->data_seq.fetch_add(1);
  if (control_->consumer_sleeping.load()) FutexWakeAll(&control_->data_seq);
}

void ShmRing::Wake() {
  wakes_.fetch_add(1);
  control_->data_seq.fetch_add(1);
  FutexWakeAll(&control_->data_seq);
  control_->space_seq.fetch_add(1);
  FutexWakeAll(&control_->space_seq);
}

}  // namespace dtrain::comm
