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
// The part of the message MemberFailure receives (never sent).
constexpr int32_t kProbePart = -2;
// A barrier spins this many pauses (a few microseconds) before sleeping: with more ranks than
// cores, a longer spin takes the core from the member it waits for.
constexpr int kSpins = 100;
// A sleeping barrier looks at the deadline and at the members' streams this often.
constexpr absl::Duration kPoll = absl::Milliseconds(5);
// Blocks of this many floats are reduced from every peer in turn and pushed to every peer, so
// the block stays in cache (L2) from its first read to its last copy.
constexpr int64_t kBlockFloats = 16 << 10;

// A set-up message: a segment's name, a nonce and a reason (each field at most its size less
// one byte), as the 64 floats a collective message carries.
struct SetUp {
  std::string name, nonce, why;
};
using Message = std::array<float, 64>;
constexpr int kFieldBytes[3] = {64, 64, 128};
Message Pack(const SetUp& m) {
  unsigned char bytes[sizeof(Message)] = {};
  int at = 0;
  for (int f = 0; f < 3; ++f) {
    const std::string& v = f == 0 ? m.name : f == 1 ? m.nonce : m.why;
    const size_t len = std::min<size_t>(v.size(), kFieldBytes[f] - 1);
    bytes[at] = static_cast<unsigned char>(len);
    memcpy(bytes + at + 1, v.data(), len);
    at += kFieldBytes[f];
  }
  Message out;
  memcpy(out.data(), bytes, sizeof(bytes));
  return out;
}
SetUp Unpack(const Message& in) {
  unsigned char bytes[sizeof(Message)];
  memcpy(bytes, in.data(), sizeof(bytes));
  SetUp m;
  int at = 0;
  for (int f = 0; f < 3; ++f) {
    const int len = std::min<int>(bytes[at], kFieldBytes[f] - 1);
    (f == 0   ? m.name
     : f == 1 ? m.nonce
              : m.why)
        .assign(reinterpret_cast<char*>(bytes + at + 1), len);
    at += kFieldBytes[f];
  }
  return m;
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
  auto receive = [&](int from, int32_t part) -> absl::StatusOr<SetUp> {
    RETURN_IF_ERROR(
        op.Recv(from, part, in.size(), [&in](int64_t offset, absl::Span<const std::byte> piece) {
          memcpy(reinterpret_cast<std::byte*>(in.data()) + offset, piece.data(), piece.size());
        }));
    return Unpack(in);
  };
  auto send = [&](int to, int32_t part, const SetUp& m) -> absl::Status {
    const Message out = Pack(m);
    ASSIGN_OR_RETURN(SendHandle h, op.Send(to, part, out));
    return op.Wait(h);
  };
  // Around the ring, so that every member talks only to its ring neighbours (the peers a worker
  // is told about, plan/ranks.h PeerRanks): part 0, the offer, from member 0 to n-1, each member
  // mapping the segment and passing on the nonce it read there (or why it could not); part 1,
  // member n-1 to member 0: the nonce every member read; part 2, the verdict, from member 0 to
  // n-1.
  const int me = group->index();
  std::string why_not;
  absl::Status handshake = [&]() -> absl::Status {
    if (me == 0) {
      absl::StatusOr<ShmSegment> segment =
          n > kMaxMembers ? absl::StatusOr<ShmSegment>(absl::UnimplementedError(
                                absl::StrCat("more than ", kMaxMembers, " members")))
                          : ShmSegment::Create(bytes);
      SetUp offer;
      std::string nonce;
      if (segment.ok()) {
        s->segment_ = *std::move(segment);
        Control* c = new (s->segment_.base()) Control();
        c->members = n;
        c->capacity = capacity_floats;
        if (getrandom(c->nonce, kNonceBytes, 0) != kNonceBytes) {
          return absl::UnavailableError("getrandom failed");
        }
        c->magic.store(kMagic, std::memory_order_release);
        offer.name = s->segment_.name();
        nonce.assign(reinterpret_cast<const char*>(c->nonce), kNonceBytes);
      } else {
        offer.why =
            absl::StrCat("member 0 could not create the segment: ", segment.status().message());
      }
      RETURN_IF_ERROR(send(1, 0, offer));
      ASSIGN_OR_RETURN(SetUp answer, receive(n - 1, 1));
      why_not = answer.why;
      if (why_not.empty() && !PeerSecretsEqual(answer.nonce, nonce)) {
        why_not = "the members mapped another segment";
      }
      s->segment_.Unlink();  // every member mapped it, or gave up: the name goes
      return send(1, 2, SetUp{why_not.empty() ? "1" : "", "", why_not});
    }
    ASSIGN_OR_RETURN(SetUp offer, receive(me - 1, 0));
    if (offer.why.empty()) {
      absl::StatusOr<ShmSegment> segment = ShmSegment::Attach(offer.name, bytes);
      std::string why;
      if (!segment.ok()) {
        why = std::string(segment.status().message());
      } else {
        const Control* c = static_cast<const Control*>(segment->base());
        const std::string nonce(reinterpret_cast<const char*>(c->nonce), kNonceBytes);
        if (c->magic.load(std::memory_order_acquire) != kMagic || c->members != n ||
            c->capacity != capacity_floats || segment->bytes() != bytes) {
          why = "not a segment of this version and size";
        } else if (me > 1 && !PeerSecretsEqual(offer.nonce, nonce)) {
          why = "another segment than the previous member's";
        } else {
          offer.nonce = nonce;
          s->segment_ = *std::move(segment);
        }
      }
      if (!why.empty()) {
        offer.why =
            absl::StrCat("member ", me, " (", group->transport().PeerName(group->rank_at(me)),
                         ") could not map it: ", why);
      }
    }
    RETURN_IF_ERROR(me == n - 1 ? send(0, 1, offer) : send(me + 1, 0, offer));
    ASSIGN_OR_RETURN(SetUp verdict, receive(me - 1, 2));
    if (me < n - 1) RETURN_IF_ERROR(send(me + 1, 2, verdict));
    if (verdict.name != "1") why_not = verdict.why.empty() ? "member 0 gave up" : verdict.why;
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
  // Named as the transport names ranks; a worker knows the workers of its ring neighbours only
  // (plan/ranks.h PeerRanks) and blames the ones its error names, so the error names one of
  // them, as the ring's aborts do: the failed member if it is one, else the member that saw it
  // if that one is, else this member's predecessor, which fails with the same error.
  const Transport& t = group_->transport();
  const int n = group_->size(), me = group_->index();
  const auto neighbour = [&](int j) { return j == (me + 1) % n || j == (me + n - 1) % n; };
  const auto name = [&](int j) { return t.PeerName(group_->rank_at(j)); };
  std::string seen = absl::StrCat("seen by member ", by);
  if (!neighbour(member)) {
    if (neighbour(by)) {
      absl::StrAppend(&seen, " (", name(by), ")");
    } else {
      const int before = (me + n - 1) % n;
      absl::StrAppend(&seen, "; member ", before, " (", name(before), ") fails with it");
    }
  }
  return absl::AbortedError(absl::StrCat("member ", member, " (", name(member),
                                         ") failed the shared all-reduce buffers (", seen, ")"));
}

void SharedAllReduce::RecordFailure(int member) {
  int32_t none = 0;
  if (control_->failed.compare_exchange_strong(none, member + 1)) {
    control_->failed_seen_by.store(group_->index());
  }
  control_->seq.fetch_add(1);
  shm::FutexWakeAll(&control_->seq);
}

absl::Status SharedAllReduce::MemberFailure(int member) const {
  Transport& t = group_->transport();
  const int rank = group_->rank_at(member);
  RETURN_IF_ERROR(t.PeerStatus(rank));
  // A message nobody sends: a receive of it ends at once only with the member's failure.
  const MessageKey probe = MessageKey::Collective(group_->id(), -1, kProbePart);
  if (!t.Arrived(rank, probe)) return absl::OkStatus();
  absl::Status s = t.Recv(
      rank, probe, TensorMeta::Bytes(0), [](int64_t, absl::Span<const std::byte>) {}, absl::Now());
  return absl::IsDeadlineExceeded(s) ? absl::OkStatus() : s;
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
    if (absl::Status failed = RecordedFailure(); !failed.ok()) {
      // Every member stores its arrival before it can record a failure past this barrier (the
      // op check after barrier 1), so a failure seen here with everyone arrived is theirs: the
      // barrier passed, and this member finds the same mismatch itself.
      if (missing() < 0) return absl::OkStatus();
      return op.Fail(failed);
    }
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
    // A member that died, left or gave up fails everyone now, naming it.
    for (int j = 0; j < n; ++j) {
      if (c.slots[j].arrived.load() >= k) continue;
      if (absl::Status gone = MemberFailure(j); !gone.ok()) {
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
  barriers_ += 2;
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
  // Phases 1 and 2, block by block, so that a block is pushed while it is still in cache:
  // segment `me` of every buffer reduced into ours, then copied, final, into every peer's buffer.
  // Nobody else touches segment `me` of any buffer (each member reduces its own segment only),
  // so no barrier separates the phases.
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
    for (int i = 1; i < n; ++i) {
      memcpy(BufferOf((me + i) % n) + offset + b, mine + b, len * sizeof(float));
    }
  }
  // Barrier 2: every buffer holds every segment, and nobody touches another's buffer any more.
  return c.Finish(Barrier(k + 2, c));
}

}  // namespace dtrain::comm
