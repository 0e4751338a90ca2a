#include "kernels/tests/reference.h"

#include <algorithm>
#include <cmath>

namespace dtrain::kernels::reference {

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const Vec& a, int lda,
          const Vec& b, int ldb, double beta, Vec& c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) {
        const double aip = trans_a ? a[int64_t{p} * lda + i] : a[int64_t{i} * lda + p];
        const double bpj = trans_b ? b[int64_t{j} * ldb + p] : b[int64_t{p} * ldb + j];
        sum += aip * bpj;
      }
      double& cij = c[int64_t{i} * ldc + j];
      cij = alpha * sum + (beta == 0.0 ? 0.0 : beta * cij);
    }
  }
}

Vec Embedding(const std::vector<int32_t>& tokens, const Vec& wte, const Vec& wpe, int B, int T,
              int C) {
  Vec out(int64_t{B} * T * C);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const int64_t n = int64_t{b} * T + t;
      for (int c = 0; c < C; ++c) {
        out[n * C + c] = wte[int64_t{tokens[n]} * C + c] + wpe[int64_t{t} * C + c];
      }
    }
  }
  return out;
}

LayerNormResult LayerNorm(const Vec& inp, const Vec& weight, const Vec& bias, int N, int C) {
  LayerNormResult r{Vec(inp.size()), Vec(N), Vec(N)};
  for (int n = 0; n < N; ++n) {
    const double* x = &inp[int64_t{n} * C];
    double mean = 0.0;
    for (int c = 0; c < C; ++c) mean += x[c];
    mean /= C;
    double var = 0.0;
    for (int c = 0; c < C; ++c) var += (x[c] - mean) * (x[c] - mean);
    var /= C;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; ++c) {
      r.out[int64_t{n} * C + c] = (x[c] - mean) * rstd * weight[c] + bias[c];
    }
    r.mean[n] = mean;
    r.rstd[n] = rstd;
  }
  return r;
}

Vec Matmul(const Vec& inp, const Vec& weight, const Vec& bias, int N, int C, int OC) {
  Vec out(int64_t{N} * OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double sum = bias.empty() ? 0.0 : bias[o];
      for (int c = 0; c < C; ++c) sum += inp[int64_t{n} * C + c] * weight[int64_t{c} * OC + o];
      out[int64_t{n} * OC + o] = sum;
    }
  }
  return out;
}

Vec Gelu(const Vec& x) {
  const double kScale = std::sqrt(2.0 / M_PI);
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = 0.5 * x[i] * (1.0 + std::tanh(kScale * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  }
  return out;
}

Vec GeluBackwardByDifferences(const Vec& x, const Vec& dy, double h) {
  Vec plus(x.size()), minus(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    plus[i] = x[i] + h;
    minus[i] = x[i] - h;
  }
  const Vec fp = Gelu(plus), fm = Gelu(minus);
  Vec want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = (fp[i] - fm[i]) / (2 * h) * dy[i];
  return want;
}

AttentionResult Attention(const Vec& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  AttentionResult r{Vec(int64_t{B} * T * C), Vec(int64_t{B} * NH * T * T, 0.0)};
  auto at = [&](int b, int t, int part, int h, int i) {
    return qkv[(int64_t{b} * T + t) * 3 * C + part * C + h * hs + i];
  };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      double* att = &r.att[(int64_t{b} * NH + h) * T * T];
      for (int t = 0; t < T; ++t) {
        // Scores against keys 0..t, softmax over them; keys after t are masked (stay 0).
        double max = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          double s = 0.0;
          for (int i = 0; i < hs; ++i) s += at(b, t, 0, h, i) * at(b, u, 1, h, i);
          att[t * T + u] = s * scale;
          max = std::max(max, att[t * T + u]);
        }
        double sum = 0.0;
        for (int u = 0; u <= t; ++u) sum += (att[t * T + u] = std::exp(att[t * T + u] - max));
        for (int u = 0; u <= t; ++u) att[t * T + u] /= sum;
        for (int i = 0; i < hs; ++i) {
          double o = 0.0;
          for (int u = 0; u <= t; ++u) o += att[t * T + u] * at(b, u, 2, h, i);
          r.out[(int64_t{b} * T + t) * C + h * hs + i] = o;
        }
      }
    }
  }
  return r;
}

CrossEntropyResult CrossEntropy(const Vec& logits, const std::vector<int32_t>& targets, int N,
                                int V) {
  CrossEntropyResult r{Vec(N), Vec(logits.size())};
  for (int n = 0; n < N; ++n) {
    const double* x = &logits[int64_t{n} * V];
    const double max = *std::max_element(x, x + V);
    double sum = 0.0;
    for (int i = 0; i < V; ++i) sum += std::exp(x[i] - max);
    for (int i = 0; i < V; ++i) r.probs[int64_t{n} * V + i] = std::exp(x[i] - max) / sum;
    r.losses[n] = std::log(sum) - (x[targets[n]] - max);
  }
  return r;
}

void AdamW(Vec& params, const Vec& grads, Vec& m, Vec& v, double lr, double beta1, double beta2,
           double eps, double weight_decay, int step, double grad_scale) {
  // torch/optim/adamw.py, _single_tensor_adamw (1.13).
  const double bias_correction1 = 1.0 - std::pow(beta1, step);
  const double bias_correction2 = 1.0 - std::pow(beta2, step);
  const double step_size = lr / bias_correction1;
  for (size_t i = 0; i < params.size(); ++i) {
    const double g = grads[i] * grad_scale;
    params[i] *= 1.0 - lr * weight_decay;
    m[i] = beta1 * m[i] + (1.0 - beta1) * g;
    v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
    const double denom = std::sqrt(v[i]) / std::sqrt(bias_correction2) + eps;
    params[i] -= step_size * m[i] / denom;
  }
}

}  // namespace dtrain::kernels::reference
