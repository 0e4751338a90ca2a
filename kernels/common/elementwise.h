// Element-wise math shared by the CPU and CUDA backends. Each function is __host__ __device__, so
// the CPU tests exercise exactly the code the GPU kernels run.
#ifndef DTRAIN_KERNELS_COMMON_ELEMENTWISE_H_
#define DTRAIN_KERNELS_COMMON_ELEMENTWISE_H_

#include <cmath>

#ifdef __CUDACC__
#define DTRAIN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define DTRAIN_HOST_DEVICE inline
#endif

namespace dtrain::kernels {

// sqrt(2/pi), the constant of GPT-2's tanh GELU.
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCube = 0.044715f;

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as torch's approximate="tanh".
DTRAIN_HOST_DEVICE float GeluTanh(float x) {
  float cube = kGeluCube * x * x * x;
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
}

// d gelu(x) / dx.
DTRAIN_HOST_DEVICE float GeluTanhGrad(float x) {
  float cube = kGeluCube * x * x * x;
  float tanh_arg = kGeluScale * (x + cube);
  float tanh_out = tanhf(tanh_arg);
  float sech2 = 1.0f - tanh_out * tanh_out;
  return 0.5f * (1.0f + tanh_out) +
         x * 0.5f * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
}

// One AdamW element update in torch.optim.AdamW's order of operations:
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps),  bc_i = 1 - b_i^step.
DTRAIN_HOST_DEVICE void AdamWElement(float* param, float grad, float* m, float* v, float lr,
                                     float beta1, float beta2, float eps, float weight_decay,
                                     float bias_correction1, float bias_correction2_sqrt) {
  float p = *param * (1.0f - lr * weight_decay);
  float mm = beta1 * *m + (1.0f - beta1) * grad;
  float vv = beta2 * *v + (1.0f - beta2) * grad * grad;
  float denom = sqrtf(vv) / bias_correction2_sqrt + eps;
  *param = p - (lr / bias_correction1) * (mm / denom);
  *m = mm;
  *v = vv;
}

}  // namespace dtrain::kernels

#endif  // DTRAIN_KERNELS_COMMON_ELEMENTWISE_H_
