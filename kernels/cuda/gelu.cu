#include "kernels/cuda/gelu.cuh"

#include "kernels/common/arg_check.h"
#include "kernels/common/elementwise.h"
#include "kernels/cuda/cuda_check.h"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kBlock = 256;

__global__ void GeluForwardKernel(float* out, const float* inp, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = GeluTanh(inp[i]);
}

__global__ void GeluBackwardKernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = GeluTanhGrad(inp[i]) * dout[i];
}

}  // namespace

absl::Status GeluForward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  ArgCheck check("GeluForward");
  check.NotNull("out", out).NotNull("inp", inp).NonNegative("n", n);
  check.GridFits(CeilDiv(n, kBlock));
  if (!check.ok() || n == 0) return check.status();
  GeluForwardKernel<<<CeilDiv(n, kBlock), kBlock, 0, stream>>>(out, inp, n);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n,
                          cudaStream_t stream) {
  ArgCheck check("GeluBackward");
  check.NotNull("dinp", dinp).NotNull("inp", inp).NotNull("dout", dout).NonNegative("n", n);
  check.GridFits(CeilDiv(n, kBlock));
  if (!check.ok() || n == 0) return check.status();
  GeluBackwardKernel<<<CeilDiv(n, kBlock), kBlock, 0, stream>>>(dinp, inp, dout, n);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace dtrain::kernels::cuda
