#include "kernels/cuda/residual.cuh"

#include "kernels/common/arg_check.h"
#include "kernels/cuda/cuda_check.h"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kBlock = 256;

__global__ void ResidualForwardKernel(float* out, const float* a, const float* b, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// No __restrict__: da, db and dout may alias, and then the order of the statements matters.
__global__ void ResidualBackwardKernel(float* da, float* db, const float* dout, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

}  // namespace

absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n,
                             cudaStream_t stream) {
  ArgCheck check("ResidualForward");
  check.NotNull("out", out).NotNull("a", a).NotNull("b", b).NonNegative("n", n);
  check.GridFits(CeilDiv(n, kBlock));
  if (!check.ok() || n == 0) return check.status();
  ResidualForwardKernel<<<CeilDiv(n, kBlock), kBlock, 0, stream>>>(out, a, b, n);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t n,
                              cudaStream_t stream) {
  ArgCheck check("ResidualBackward");
  check.NotNull("da", da).NotNull("db", db).NotNull("dout", dout).NonNegative("n", n);
  check.GridFits(CeilDiv(n, kBlock));
  if (!check.ok() || n == 0) return check.status();
  ResidualBackwardKernel<<<CeilDiv(n, kBlock), kBlock, 0, stream>>>(da, db, dout, n);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cuda
