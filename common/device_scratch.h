#ifndef DTRAIN_COMMON_DEVICE_SCRATCH_H_
#define DTRAIN_COMMON_DEVICE_SCRATCH_H_

// The layout of the CUDA backend's scratch (kernels/cuda) that the plan's memory estimate counts
// (plan/memory.h, RankMemory.device_scratch): here so that the kernels and the estimate, which
// may not link each other, read one definition. Plain C++: nvcc and g++ both compile it.

namespace dtrain {

// AddColumnSums (kernels/cuda/column_sums.cuh) writes one partial sum per chunk of this many
// rows, per output and column, before adding the chunks in order.
inline constexpr int kColumnSumChunkRows = 64;

// With matmul_precision bf16 each GEMM operand is converted to bf16 (2 bytes an element) into
// a scratch buffer, one for the left operand and one for the right (kernels/cuda/matmul.cu).
inline constexpr int kBf16OperandBytes = 2;

}  // namespace dtrain

#endif  // DTRAIN_COMMON_DEVICE_SCRATCH_H_
