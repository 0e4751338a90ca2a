// Residual connection on the GPU: out = a + b and its backward.
#ifndef DTRAIN_KERNELS_CUDA_RESIDUAL_CUH_
#define DTRAIN_KERNELS_CUDA_RESIDUAL_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace dtrain::kernels::cuda {

// out (n) = a (n) + b (n). out may equal a or b.
absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n,
                             cudaStream_t stream);

// da (n) += dout; db (n) += dout. Element i reads dout[i] before each update, as a plain loop
// would, so aliased arguments behave as on the CPU.
absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t n,
                              cudaStream_t stream);

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_RESIDUAL_CUH_
