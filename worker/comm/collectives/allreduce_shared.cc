#include "worker/comm/collectives/allreduce_shared.h"

#include <sys/random.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/peer_secret.h"
#include "common/status_macros.h"
#include "worker/comm/collectives/allreduce_ring.h"

namespace dtrain::comm {
namespace {

constexpr uint64_t kMagic = 0x3152414873687364;  // "dshHAR1"
constexpr int kMaxMembers = 256;
constexpr int kNonceBytes = 32;
// A barrier spins this many pauses (a few microseconds) before sleeping: with more ranks than
// cores, a longer spin takes the core from the member it waits for.
constexpr int kSpins = 100;
// A sleeping barrier looks at the deadline and at the members' streams this often.
constexpr absl::Duration kPoll = absl::Milliseconds(5);
// Phase 1 reduces blocks of this many floats from every peer in turn, so the destination block
// stays in cache while the peers' blocks stream through.
constexpr int64_t kBlockFloats = 16 << 10;

// One member's set-up message: two fields of at most 63 bytes each (a segment's name or a
// nonce, then a reason), as the 32 floats a collective message carries.
using Message = std::array<float, 32>;
Message Pack(absl::string_view first, absl::string_view second) {
  unsigned char bytes[sizeof(Message)] = {};
  first = first.substr(0, 63);
  second = second.substr(0, 63);
  bytes[0] = static_cast<unsigned char>(first.size());
  memcpy(bytes + 1, first.data(), first.size());
  bytes[64] = static_cast<unsigned char>(second.size());
  memcpy(bytes + 65, second.data(), second.size());
  Message m;
  memcpy(m.data(), bytes, sizeof(bytes));
  return m;
}
std::pair<std::string, std::string> Unpack(const Message& m) {
  unsigned char bytes[sizeof(Message)];
  memcpy(bytes, m.data(), sizeof(bytes));
  const int a = std::min<int>(bytes[0], 63), b = std::min<int>(bytes[64], 63);
  return {std::string(reinterpret_cast<char*>(bytes + 1), a),
          std::string(reinterpret_cast<char*>(bytes + 65), b)};
}

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace

struct SharedAllReduce::Control {
  std::atomic<uint64_t> magic;  // set last by member 0
  int32_t members;
  int64_t capacity;  // floats per buffer
  unsigned char nonce[kNonceBytes];
  alignas(64) std::atomic<uint32_t> seq;  // futex: bumped at every arrival and failure
  std::atomic<uint32_t> sleepers;         // members sleeping on seq
  std::atomic<int32_t> failed;            // 0, or 1 + the member that failed
  std::atomic<int32_t> failed_seen_by;    // the member that recorded it
  // Per member, on a cache line of its own: barriers passed, and the op it runs (checked equal).
  struct alignas(64) Slot {
    std::atomic<uint64_t> arrived;
    int64_t offset;
    int64_t count;
    int32_t op;
  } slots[kMaxMembers];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

absl::StatusOr<std::unique_ptr<SharedAllReduce>> SharedAllReduce::Create(Group* group,
                                                                         int64_t capacity_floats) {
  if (capacity_floats <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared all-reduce buffers of ", capacity_floats, " floats"));
  }
  std::unique_ptr<SharedAllReduce> s(new SharedAllReduce());
  s->group_ = group;
  const int n = group->size();
  if (n == 1) {
    s->why_not_ = "a group of one member";
    return s;
  }
  s->capacity_ = capacity_floats;
  s->stride_ = RoundUp(capacity_floats, 4096 / sizeof(float));  // buffers start page-aligned
  const int64_t control_bytes = RoundUp(sizeof(Control), 4096);
  const int64_t bytes = control_bytes + n * s->stride_ * int64_t{sizeof(float)};
  CollectiveOp op(
      *group, absl::StrCat("setting up shared all-reduce buffers of ", capacity_floats, " floats"));
  Message in;
  auto into = [&in](int64_t offset, absl::Span<const std::byte> piece) {
    memcpy(reinterpret_cast<std::byte*>(in.data()) + offset, piece.data(), piece.size());
  };
  std::string why_not;
  // Messages: part 0 the offer (member 0 to each), 1 the answer, 2 the verdict.
  absl::Status handshake = [&]() -> absl::Status {
    if (group->index() == 0) {
      // 1. Create the segment and offer its name to every member.
      absl::StatusOr<ShmSegment> segment =
          n > kMaxMembers ? absl::StatusOr<ShmSegment>(absl::UnimplementedError(
                                absl::StrCat("more than ", kMaxMembers, " members")))
                          : ShmSegment::Create(bytes);
      std::string name;
      if (segment.ok()) {
        s->segment_ = *std::move(segment);
        Control* c = new (s->segment_.base()) Control();
        c->members = n;
        c->capacity = capacity_floats;
        if (getrandom(c->nonce, kNonceBytes, 0) != kNonceBytes) {
          return absl::UnavailableError("getrandom failed");
        }
        c->magic.store(kMagic, std::memory_order_release);
        name = s->segment_.name();
      } else {
        why_not =
            absl::StrCat("member 0 could not create the segment: ", segment.status().message());
      }
      const Message offer = Pack(name, why_not);
      std::vector<SendHandle> sends;
      for (int j = 1; j < n; ++j) {
        ASSIGN_OR_RETURN(SendHandle h, op.Send(j, 0, offer));
        sends.push_back(std::move(h));
      }
      // 2. Every member answers the nonce it read (or why it could not map the segment).
      const std::string nonce =
          s->segment_.base() == nullptr
              ? std::string()
              : std::string(
                    reinterpret_cast<const char*>(static_cast<Control*>(s->segment_.base())->nonce),
                    kNonceBytes);
      for (int j = 1; j < n; ++j) {
        RETURN_IF_ERROR(op.Recv(j, 1, in.size(), into));
        auto [their_nonce, why] = Unpack(in);
        if (why_not.empty() && (nonce.empty() || !PeerSecretsEqual(their_nonce, nonce))) {
          why_not = absl::StrCat("member ", j, " (", group->transport().PeerName(group->rank_at(j)),
                                 ") could not map it: ", why.empty() ? "another segment" : why);
        }
      }
      // 3. Everyone mapped it (or gave up): the name goes, and everyone learns the verdict.
      s->segment_.Unlink();
      const Message verdict = Pack(why_not.empty() ? "1" : "", why_not);
      for (int j = 1; j < n; ++j) {
        ASSIGN_OR_RETURN(SendHandle h, op.Send(j, 2, verdict));
        sends.push_back(std::move(h));
      }
      for (SendHandle& h : sends) RETURN_IF_ERROR(op.Wait(h));
    } else {
      RETURN_IF_ERROR(op.Recv(0, 0, in.size(), into));
      auto [name, why_none] = Unpack(in);
      std::string nonce, why;
      if (name.empty()) {
        why = why_none;
      } else if (absl::StatusOr<ShmSegment> segment = ShmSegment::Attach(name, bytes);
                 !segment.ok()) {
        why = std::string(segment.status().message());
      } else {
        const Control* c = static_cast<const Control*>(segment->base());
        if (c->magic.load(std::memory_order_acquire) != kMagic || c->members != n ||
            c->capacity != capacity_floats || segment->bytes() != bytes) {
          why = "not a segment of this version and size";
        } else {
          nonce.assign(reinterpret_cast<const char*>(c->nonce), kNonceBytes);
          s->segment_ = *std::move(segment);
        }
      }
      ASSIGN_OR_RETURN(SendHandle h, op.Send(0, 1, Pack(nonce, why)));
      RETURN_IF_ERROR(op.Wait(h));
      RETURN_IF_ERROR(op.Recv(0, 2, in.size(), into));
      auto [ok, verdict_why] = Unpack(in);
      if (ok != "1") why_not = verdict_why.empty() ? "member 0 gave up" : verdict_why;
    }
    return absl::OkStatus();
  }();
  RETURN_IF_ERROR(op.Finish(handshake));
  if (!why_not.empty()) {
    s->segment_ = ShmSegment();  // unmapped: nobody uses it
    s->why_not_ = std::move(why_not);
    return s;
  }
  s->control_ = static_cast<Control*>(s->segment_.base());
  s->mine_ = absl::MakeSpan(s->BufferOf(group->index()), capacity_floats);
  return s;
}

float* SharedAllReduce::BufferOf(int member) const {
  std::byte* data = static_cast<std::byte*>(segment_.base()) + RoundUp(sizeof(Control), 4096);
  return reinterpret_cast<float*>(data) + member * stride_;
}

absl::Status SharedAllReduce::RecordedFailure() const {
  const int32_t failed = control_->failed.load();
  if (failed == 0) return absl::OkStatus();
  const int member = failed - 1;
  const int by = control_->failed_seen_by.load();
  return absl::AbortedError(absl::StrCat("member ", member, " (",
                                         group_->transport().PeerName(group_->rank_at(member)),
                                         ") failed the shared all-reduce buffers (seen by ",
                                         group_->transport().PeerName(group_->rank_at(by)), ")"));
}

void SharedAllReduce::RecordFailure(int member) {
  int32_t none = 0;
  if (control_->failed.compare_exchange_strong(none, member + 1)) {
    control_->failed_seen_by.store(group_->index());
  }
  control_->seq.fetch_add(1);
  shm::FutexWakeAll(&control_->seq);
}

absl::Status SharedAllReduce::Barrier(uint64_t k, CollectiveOp& op) {
  Control& c = *control_;
  const int n = group_->size();
  c.slots[group_->index()].arrived.store(k);
  c.seq.fetch_add(1);
  if (c.sleepers.load() > 0) shm::FutexWakeAll(&c.seq);
  // The first member that has not arrived yet, or -1.
  auto missing = [&]() {
    for (int j = 0; j < n; ++j) {
      if (c.slots[j].arrived.load() < k) return j;
    }
    return -1;
  };
  for (int spin = 0;; ++spin) {
    if (missing() < 0) return absl::OkStatus();
    if (absl::Status failed = RecordedFailure(); !failed.ok()) return op.Fail(failed);
    if (spin < kSpins) {
      shm::CpuRelax();
      continue;
    }
    const uint32_t seen = c.seq.load();
    c.sleepers.fetch_add(1);
    const int late = missing();  // after `seen`: an arrival since bumps seq, the futex returns
    if (late < 0 || c.failed.load() != 0) {
      c.sleepers.fetch_sub(1);
      continue;
    }
    // A member whose stream broke (it died) fails everyone now, naming it.
    for (int j = 0; j < n; ++j) {
      if (j == group_->index()) continue;
      if (absl::Status gone = group_->transport().PeerStatus(group_->rank_at(j)); !gone.ok()) {
        c.sleepers.fetch_sub(1);
        RecordFailure(j);
        return op.Fail(gone);
      }
    }
    const absl::Time now = absl::Now();
    if (now >= op.deadline()) {
      c.sleepers.fetch_sub(1);
      RecordFailure(late);
      return op.Fail(absl::DeadlineExceededError(absl::StrCat(
          "member ", late, " (", group_->transport().PeerName(group_->rank_at(late)),
          ") did not reach barrier ", k, " of the shared all-reduce buffers by the deadline")));
    }
    shm::FutexWait(&c.seq, seen, std::min(op.deadline() - now, kPoll));
    c.sleepers.fetch_sub(1);
  }
}

absl::Status SharedAllReduce::Run(absl::Span<float> data, ReduceOp op) {
  const int n = group_->size();
  if (n == 1 || data.empty()) return absl::OkStatus();
  const bool inside = shared() && data.data() >= mine_.data() &&
                      data.data() + data.size() <= mine_.data() + mine_.size();
  if (!inside) return AllReduce(*group_, data, op);
  CollectiveOp c(*group_, absl::StrCat("all-reduce ", ReduceOpName(op), " of ", data.size(),
                                       " floats (shared buffers)"));
  if (absl::Status failed = RecordedFailure(); !failed.ok()) return c.Finish(c.Fail(failed));
  const int me = group_->index();
  const int64_t offset = data.data() - mine_.data();
  const int64_t count = data.size();
  Control::Slot& slot = control_->slots[me];
  slot.offset = offset;
  slot.count = count;
  slot.op = static_cast<int32_t>(op);
  const uint64_t k = barriers_;
  barriers_ += 3;
  // Barrier 1: every member's data is in place (and so is its description of the op).
  RETURN_IF_ERROR(c.Finish(Barrier(k + 1, c)));
  // Every member compares every member's op with member 0's, so all name the same one.
  const Control::Slot& first = control_->slots[0];
  for (int j = 1; j < n; ++j) {
    const Control::Slot& other = control_->slots[j];
    if (other.offset != first.offset || other.count != first.count || other.op != first.op) {
      RecordFailure(j);
      return c.Finish(c.Fail(absl::InvalidArgumentError(absl::StrCat(
          "member ", j, " (", group_->transport().PeerName(group_->rank_at(j)), ") runs ",
          ReduceOpName(static_cast<ReduceOp>(other.op)), " of ", other.count, " floats at ",
          other.offset, ", member 0 ", ReduceOpName(static_cast<ReduceOp>(first.op)), " of ",
          first.count, " at ", first.offset))));
    }
  }
  // Phase 1: segment `me` of every buffer, reduced into ours, block by block.
  const Segment seg = RingSegment(count, n, me);
  float* mine = mine_.data() + offset;
  const float divisor = op == ReduceOp::kMean ? static_cast<float>(n) : 0;
  for (int64_t b = seg.begin; b < seg.begin + seg.size; b += kBlockFloats) {
    const int64_t len = std::min(kBlockFloats, seg.begin + seg.size - b);
    for (int i = 1; i < n; ++i) {
      const float* theirs = BufferOf((me + i) % n) + offset;
      ReduceInto(mine + b, reinterpret_cast<const std::byte*>(theirs + b), len, op,
                 i == n - 1 ? divisor : 0);
    }
  }
  // Barrier 2: every segment is final in its owner's buffer.
  RETURN_IF_ERROR(c.Finish(Barrier(k + 2, c)));
  // Phase 2: every other segment, from its owner.
  for (int i = 1; i < n; ++i) {
    const int q = (me + i) % n;
    const Segment theirs = RingSegment(count, n, q);
    memcpy(mine + theirs.begin, BufferOf(q) + offset + theirs.begin, theirs.size * sizeof(float));
  }
  // Barrier 3: nobody reads our buffer any more.
  return c.Finish(Barrier(k + 3, c));
}

}  // namespace dtrain::comm
