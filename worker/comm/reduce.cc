#include "worker/comm/reduce.h"

#include <algorithm>
#include <cstring>

namespace dtrain::comm {
namespace {

inline float Load(const std::byte* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// One loop per op, so each vectorizes (built with -O3; see BUILD).
template <typename F>
void Apply(float* __restrict dst, const std::byte* __restrict src, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f(dst[i], Load(src + 4 * i));
}

template <typename F>
void ApplyDivide(float* __restrict dst, const std::byte* __restrict src, int64_t n, float d, F f) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f(dst[i], Load(src + 4 * i)) / d;
}

struct Sum {
  float operator()(float a, float b) const { return a + b; }
};
// b wins when it is smaller or NaN, so NaN propagates whichever side holds it (a NaN `a` stays
// because every comparison with it is false).
struct Min {
  float operator()(float a, float b) const { return (b < a || b != b) ? b : a; }
};
struct Max {
  float operator()(float a, float b) const { return (b > a || b != b) ? b : a; }
};

template <typename F>
void Dispatch(float* dst, const std::byte* src, int64_t n, float divisor, F f) {
  if (divisor != 0) {
    ApplyDivide(dst, src, n, divisor, f);
  } else {
    Apply(dst, src, n, f);
  }
}

}  // namespace

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
}

void ReduceInto(float* dst, const std::byte* src, int64_t n, ReduceOp op, float divisor) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return Dispatch(dst, src, n, divisor, Sum());
    case ReduceOp::kMin:
      return Dispatch(dst, src, n, divisor, Min());
    case ReduceOp::kMax:
      return Dispatch(dst, src, n, divisor, Max());
  }
}

void PieceReducer::operator()(int64_t offset, absl::Span<const std::byte> piece) {
  const std::byte* p = piece.data();
  size_t left = piece.size();
  int64_t element = offset / 4;  // the element the piece's first byte belongs to
  if (carried_ > 0) {
    // Complete the float split across the previous piece and this one.
    size_t take = std::min<size_t>(4 - carried_, left);
    std::memcpy(carry_ + carried_, p, take);
    carried_ += static_cast<int>(take);
    p += take;
    left -= take;
    if (carried_ < 4) return;
    ReduceInto(dst_ + element, carry_, 1, op_, divisor_);
    carried_ = 0;
    ++element;
  }
  int64_t whole = static_cast<int64_t>(left / 4);
  if (element + whole > count_) whole = count_ - element;  // the inbox bounds offsets already
  ReduceInto(dst_ + element, p, whole, op_, divisor_);
  p += 4 * whole;
  left -= 4 * whole;
  std::memcpy(carry_, p, left);
  carried_ = static_cast<int>(left);
}

}  // namespace dtrain::comm
