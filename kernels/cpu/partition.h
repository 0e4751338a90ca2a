// Splitting a range across threads.
#ifndef DTRAIN_KERNELS_CPU_PARTITION_H_
#define DTRAIN_KERNELS_CPU_PARTITION_H_

#include <cstdint>

namespace dtrain::kernels::cpu {

// Start of part `part` of [0, extent) cut into `parts` near-equal pieces whose inner bounds are
// multiples of `align`; SplitPoint(extent, parts, parts, align) == extent. Some pieces may be
// empty when extent < parts * align. Part p is [SplitPoint(p), SplitPoint(p + 1)).
// Int is int or int64_t (element counts of whole tensors).
template <typename Int>
inline Int SplitPoint(Int extent, int part, int parts, int align) {
  if (part >= parts) return extent;
  return static_cast<Int>(int64_t{extent} * part / parts) / align * align;
}

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_PARTITION_H_
