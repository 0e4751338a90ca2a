// Warp-level reductions shared by the .cu files (device code only; include from .cu files).
#ifndef DTRAIN_KERNELS_CUDA_REDUCE_CUH_
#define DTRAIN_KERNELS_CUDA_REDUCE_CUH_

namespace dtrain::kernels::cuda {

constexpr int kWarpSize = 32;

// Every lane of a full warp must call these; every lane gets the result.
template <typename T>
__device__ __forceinline__ T WarpReduceSum(T value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

__device__ __forceinline__ float WarpReduceMax(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_REDUCE_CUH_
