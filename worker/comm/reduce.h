// Element-wise reductions for collectives, applied straight to received bytes (no staging
// copy): a received piece may start or end in the middle of a float, and its floats need not be
// aligned, so loads go through memcpy (which compiles to unaligned vector loads).
//
//   PieceReducer reduce(segment.data(), segment.size(), ReduceOp::kSum);
//   RETURN_IF_ERROR(transport.Recv(peer, key, meta,
//       [&](int64_t offset, absl::Span<const std::byte> piece) { reduce(offset, piece); },
//       deadline));
#ifndef DTRAIN_WORKER_COMM_REDUCE_H_
#define DTRAIN_WORKER_COMM_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dtrain::comm {

// kMean sums and divides by the number of ranks once, at the end: the result is the exactly
// rounded sum / n whenever the sum is exact. kMin and kMax propagate NaN.
enum class ReduceOp { kSum, kMean, kMin, kMax };
absl::string_view ReduceOpName(ReduceOp op);

// dst[i] = op(dst[i], src[i]) for i < n (kMean adds); then, when divisor != 0,
// dst[i] /= divisor. `src` holds n floats at any alignment.
void ReduceInto(float* dst, const std::byte* src, int64_t n, ReduceOp op, float divisor = 0);

// A PieceSink that reduces a message of `count` floats into `dst`, in place, dividing each
// finished element by `divisor` when it is not 0. Pieces must come in order of offset.
class PieceReducer {
 public:
  PieceReducer(float* dst, int64_t count, ReduceOp op, float divisor = 0)
      : dst_(dst), count_(count), op_(op), divisor_(divisor) {}
  void operator()(int64_t offset, absl::Span<const std::byte> piece);

 private:
  float* dst_;
  int64_t count_;
  ReduceOp op_;
  float divisor_;
  std::byte carry_[4];  // the first bytes of a float split across pieces
  int carried_ = 0;
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_REDUCE_H_
