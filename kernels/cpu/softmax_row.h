// The row softmax shared by attention and cross-entropy. Compiled inside their -ffast-math units
// so exp vectorizes through libmvec.
#ifndef DTRAIN_KERNELS_CPU_SOFTMAX_ROW_H_
#define DTRAIN_KERNELS_CPU_SOFTMAX_ROW_H_

#include <cmath>

namespace dtrain::kernels::cpu {

// p[0..len) = softmax(x[0..len)); p may equal x. Returns the row max, and sets *sum to
// sum(exp(x - max)), so -log p[i] = log(*sum) - (x[i] - max) stays exact where p[i] underflows.
inline float SoftmaxRow(const float* x, float* p, int len, float* sum_out) {
  float max = x[0];
#pragma omp simd reduction(max : max)
  for (int u = 1; u < len; ++u) max = std::fmax(max, x[u]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int u = 0; u < len; ++u) {
    p[u] = std::exp(x[u] - max);
    sum += p[u];
  }
  const float inv_sum = 1.0f / sum;
#pragma omp simd
  for (int u = 0; u < len; ++u) p[u] *= inv_sum;
  *sum_out = sum;
  return max;
}

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_SOFTMAX_ROW_H_
