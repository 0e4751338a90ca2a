// Test support: inputs whose reductions are exact in float, and their closed forms, so that
// collectives must match bit for bit (nccl-tests' rule).
#ifndef DTRAIN_WORKER_COMM_TESTING_CLOSED_FORMS_H_
#define DTRAIN_WORKER_COMM_TESTING_CLOSED_FORMS_H_

#include <algorithm>
#include <cstdint>

#include "worker/comm/reduce.h"

namespace dtrain::comm::testing {

// Rank r's element i: an integer in [-8, 15].
inline float Input(int rank, int64_t i) {
  return static_cast<float>((i * 7 + rank * 13) % 17 - 8 + rank % 8);
}

// op over ranks 0..n-1 of Input(r, i).
inline float Expected(ReduceOp op, int n, int64_t i) {
  double sum = 0, lo = Input(0, i), hi = Input(0, i);
  for (int r = 0; r < n; ++r) {
    sum += Input(r, i);
    lo = std::min<double>(lo, Input(r, i));
    hi = std::max<double>(hi, Input(r, i));
  }
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<float>(sum);
    case ReduceOp::kMean:
      return static_cast<float>(sum) / static_cast<float>(n);  // one rounding, as the ring
    case ReduceOp::kMin:
      return static_cast<float>(lo);
    case ReduceOp::kMax:
      return static_cast<float>(hi);
  }
  return 0;
}

}  // namespace dtrain::comm::testing

#endif  // DTRAIN_WORKER_COMM_TESTING_CLOSED_FORMS_H_
