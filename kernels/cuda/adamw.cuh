// Optimizer ops on the GPU: the AdamW step (kernels/common/elementwise.h's AdamWElement, the
// CPU's own math), the squared norm for global-norm clipping, and in-place scaling.
#ifndef DTRAIN_KERNELS_CUDA_ADAMW_CUH_
#define DTRAIN_KERNELS_CUDA_ADAMW_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace dtrain::kernels::cuda {

// One AdamW step on n elements: params, m, v updated in place; grads read, times p.grad_scale.
// Bias corrections 1 - beta^step are computed on the host in float. p.step >= 1.
absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                         const AdamWParams& p, cudaStream_t stream);

// Device scratch SquaredNorm needs, in doubles.
constexpr int kSquaredNormScratchDoubles = 1024;

// *result (one double of device memory) = sum of x[i]^2 over n, accumulated in double. scratch
// holds kSquaredNormScratchDoubles doubles of device memory for per-block partial sums.
// Deterministic: the grid depends on n only, and partials are added in a fixed order.
absl::Status SquaredNorm(double* result, double* scratch, const float* x, int64_t n,
                         cudaStream_t stream);

// x (n) *= s.
absl::Status Scale(float* x, float s, int64_t n, cudaStream_t stream);

}  // namespace dtrain::kernels::cuda

#endif  // DTRAIN_KERNELS_CUDA_ADAMW_CUH_
