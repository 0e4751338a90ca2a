// Ring all-reduce, chunked and pipelined (as in gloo's AllreduceRing and NCCL's ring).
//
// The n members form a ring: member r sends to r+1 and receives from r-1 (mod n). The data
// (count floats) is cut into n segments (RingSegment). There are 2(n-1) steps; in step s every
// member sends segment (r - s - 1) to the right and receives segment (r - s - 2) from the left:
//
//   steps 0 .. n-2 (reduce-scatter): the received segment is reduced into ours. A segment
//     received at step s carries s+2 members' contributions; after step n-2 member r holds
//     segment r reduced over all n members.
//   steps n-1 .. 2n-3 (all-gather): the received segment is final and replaces ours; after
//     step 2n-3 every member holds every segment.
//
// What a member receives at step s is what it sends at step s+1. So no step waits for a whole
// segment: segments move in chunks, and each chunk is forwarded to the right as soon as it has
// been reduced (or copied), while the next chunk is still arriving. That is the pipeline: links
// stay busy, and reducing chunk j overlaps receiving chunk j+1. Reductions read the received
// bytes where the transport put them and write into `data`: no staging copies.
//
// Traffic: each member sends and receives 2(n-1)/n * count floats, the least any all-reduce
// can; hence busbw = algbw * 2(n-1)/n (docs/PERFORMANCE.md).
//
// Buffers: sends are zero-copy, so a chunk must not change while it is being sent. The only
// sent data ever overwritten is in the all-gather half: the segment received at step s went out
// at step s+1-n, and that send is waited for before the chunk is overwritten.
//
// Mean: the last reduce-scatter step divides by n, so every member ends with the same bits.
#include "worker/comm/collectives/allreduce_ring.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::comm {
namespace internal {
namespace {

constexpr int kMaxChunks = 1 << 20;  // chunks per segment; part = step * kMaxChunks + chunk
constexpr int64_t kMinChunkBytes = 16 << 10;  // smaller messages cost more than they pipeline
constexpr int kPipelineChunks = 4;            // chunks per segment when segments are small

int Mod(int a, int n) { return ((a % n) + n) % n; }

// The ring of one call: the member's place and how segments are cut into chunks.
struct Ring {
  absl::Span<float> data;
  int n;          // members
  int r;          // this member's index
  int64_t chunk;  // floats per chunk

  Segment segment(int s) const { return RingSegment(data.size(), n, Mod(s, n)); }
  int chunks_of(Segment seg) const { return static_cast<int>((seg.size + chunk - 1) / chunk); }
  absl::Span<float> chunk_span(Segment seg, int j) const {
    const int64_t begin = j * chunk;
    return data.subspan(seg.begin + begin, std::min(chunk, seg.size - begin));
  }
  static int32_t part(int step, int j) { return static_cast<int32_t>(step * kMaxChunks + j); }
};

// Steps [first_step, end_step) of the ring; sends[s - first_step][j] keeps chunk j sent at step
// s until it may be overwritten.
absl::Status Steps(CollectiveOp& op, const Ring& ring, int first_step, int end_step,
                   ReduceOp reduce, std::vector<std::vector<SendHandle>>& sends) {
  const int n = ring.n;
  const int right = Mod(ring.r + 1, n);
  const int left = Mod(ring.r - 1, n);
  // Step first_step sends our own segment, all of it at once.
  const Segment first = ring.segment(ring.r - first_step - 1);
  for (int j = 0; j < ring.chunks_of(first); ++j) {
    ASSIGN_OR_RETURN(SendHandle h,
                     op.Send(right, Ring::part(first_step, j), ring.chunk_span(first, j)));
    sends[0].push_back(std::move(h));
  }
  for (int s = first_step; s < end_step; ++s) {
    const Segment seg = ring.segment(ring.r - s - 2);
    const bool reducing = s < n - 1;
    const float divisor = (reducing && s == n - 2 && reduce == ReduceOp::kMean) ? n : 0;
    for (int j = 0; j < ring.chunks_of(seg); ++j) {
      absl::Span<float> dst = ring.chunk_span(seg, j);
      // All-gather overwrites what step s+1-n sent: wait until that send is done.
      if (!reducing && s + 1 - n >= first_step) {
        RETURN_IF_ERROR(op.Wait(sends[s + 1 - n - first_step][j]));
      }
      // Receive chunk j from the left, reducing it into ours or replacing ours.
      if (reducing) {
        PieceReducer reducer(dst.data(), dst.size(), reduce, divisor);
        RETURN_IF_ERROR(op.Recv(left, Ring::part(s, j), dst.size(),
                                [&reducer](int64_t offset, absl::Span<const std::byte> piece) {
                                  reducer(offset, piece);
                                }));
      } else {
        std::byte* out = reinterpret_cast<std::byte*>(dst.data());
        RETURN_IF_ERROR(op.Recv(left, Ring::part(s, j), dst.size(),
                                [out](int64_t offset, absl::Span<const std::byte> piece) {
                                  std::memcpy(out + offset, piece.data(), piece.size());
                                }));
      }
      // Forward it to the right at once: it is what step s+1 sends.
      if (s + 1 < end_step) {
        ASSIGN_OR_RETURN(SendHandle h, op.Send(right, Ring::part(s + 1, j), dst));
        sends[s + 1 - first_step].push_back(std::move(h));
      }
    }
  }
  // Every send must be done before the caller may touch `data` again.
  for (auto& step : sends) {
    for (SendHandle& h : step) RETURN_IF_ERROR(op.Wait(h));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunRing(CollectiveOp& op, absl::Span<float> data, int first_step, int end_step,
                     ReduceOp reduce) {
  const int n = op.group().size();
  if (n > 1024) return op.Fail(absl::InvalidArgumentError("ring of more than 1024 members"));
  // Chunk length: a quarter segment, but at least kMinChunkBytes and at most chunk_bytes.
  const int64_t largest = RingSegment(data.size(), n, 0).size;
  int64_t chunk = (largest + kPipelineChunks - 1) / kPipelineChunks;
  chunk = std::max<int64_t>(chunk, kMinChunkBytes / 4);
  chunk = std::min<int64_t>(chunk, op.group().options().chunk_bytes / 4);
  chunk = std::max<int64_t>(chunk, (largest + kMaxChunks - 1) / kMaxChunks);
  const Ring ring{data, n, op.group().index(), chunk};
  // The sends outlive the steps, so a failure is announced (Finish) before they are withdrawn.
  std::vector<std::vector<SendHandle>> sends(end_step - first_step);
  return op.Finish(Steps(op, ring, first_step, end_step, reduce, sends));
}

}  // namespace internal

absl::Status AllReduce(Group& group, absl::Span<float> data, ReduceOp op) {
  if (group.size() == 1 || data.empty()) return absl::OkStatus();
  CollectiveOp c(group,
                 absl::StrCat("all-reduce ", ReduceOpName(op), " of ", data.size(), " floats"));
  return c.Finish(internal::RunRing(c, data, 0, 2 * group.size() - 2, op));
}

std::function<absl::Status(float* data, int64_t n)> AllReduceSumFunction(Group* group) {
  return [group](float* data, int64_t n) {
    return AllReduce(*group, absl::MakeSpan(data, n), ReduceOp::kSum);
  };
}

}  // namespace dtrain::comm
