// Naive double-precision reference implementations of the backend's forward ops, written from
// the formulas in kernels/backend.h and nothing else. The tests compare every backend's forward
// against these and every backward against finite differences of these.
//
// Shapes and letters as in kernels/README.md. All buffers are row-major std::vector<double>.
#ifndef DTRAIN_KERNELS_TESTS_REFERENCE_H_
#define DTRAIN_KERNELS_TESTS_REFERENCE_H_

#include <cstdint>
#include <vector>

namespace dtrain::kernels::reference {

using Vec = std::vector<double>;

// c (m,n) = alpha * op(a) @ op(b) + beta * c, with row strides lda, ldb, ldc (c updated in place).
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const Vec& a, int lda,
          const Vec& b, int ldb, double beta, Vec& c, int ldc);

// out (B,T,C) = wte[tokens] + wpe[t].
Vec Embedding(const std::vector<int32_t>& tokens, const Vec& wte, const Vec& wpe, int B, int T,
              int C);

struct LayerNormResult {
  Vec out, mean, rstd;
};
// eps 1e-5.
LayerNormResult LayerNorm(const Vec& inp, const Vec& weight, const Vec& bias, int N, int C);

// out (N,OC) = inp (N,C) @ weight (C,OC) + bias (OC); empty bias = none.
Vec Matmul(const Vec& inp, const Vec& weight, const Vec& bias, int N, int C, int OC);

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), element-wise.
Vec Gelu(const Vec& x);
// GELU's backward by central differences of Gelu, element-wise: (gelu(x+h) - gelu(x-h)) / 2h * dy.
Vec GeluBackwardByDifferences(const Vec& x, const Vec& dy, double h = 1e-5);

struct AttentionResult {
  Vec out, att;  // out (B,T,C), att (B,NH,T,T)
};
AttentionResult Attention(const Vec& qkv, int B, int T, int C, int NH);

struct CrossEntropyResult {
  Vec losses, probs;  // losses (N), probs (N,V)
};
CrossEntropyResult CrossEntropy(const Vec& logits, const std::vector<int32_t>& targets, int N,
                                int V);

// torch.optim.AdamW's update of one tensor for one step, in double; params, m, v in place.
void AdamW(Vec& params, const Vec& grads, Vec& m, Vec& v, double lr, double beta1, double beta2,
           double eps, double weight_decay, int step, double grad_scale);

}  // namespace dtrain::kernels::reference

#endif  // DTRAIN_KERNELS_TESTS_REFERENCE_H_
