#include "kernels/op_timing_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dtrain::kernels {

std::string OpProfileTable(const std::vector<OpTime>& times, int64_t steps) {
  const double per_step = 1.0 / static_cast<double>(std::max<int64_t>(steps, 1));
  absl::Duration sum;
  for (const OpTime& t : times) sum += t.total;
  const double sum_ms = absl::ToDoubleMilliseconds(sum);
  std::string table = absl::StrFormat("%9s %6s %10s  %s\n", "ms/step", "share", "calls/step", "op");
  for (const OpTime& t : times) {
    const double ms = absl::ToDoubleMilliseconds(t.total);
    absl::StrAppendFormat(&table, "%9.3f %5.1f%% %10.1f  %s\n", ms * per_step,
                          sum_ms > 0 ? 100.0 * ms / sum_ms : 0.0,
                          static_cast<double>(t.calls) * per_step, t.op);
  }
  absl::StrAppendFormat(&table, "%9.3f %5.1f%% %10s  (every op)\n", sum_ms * per_step, 100.0, "");
  return table;
}

OpTimingBackend::OpTimingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

std::vector<OpTime> OpTimingBackend::Times() const {
  std::vector<OpTime> rows;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [op, t] : times_) rows.push_back(t);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OpTime& a, const OpTime& b) { return a.total > b.total; });
  return rows;
}

void OpTimingBackend::Reset() {
  absl::MutexLock lock(&mu_);
  times_.clear();
}

absl::Status OpTimingBackend::Timed(absl::Time start, std::string op, absl::Status status) {
  if (status.ok()) status = inner_->Synchronize();
  const absl::Duration elapsed = absl::Now() - start;
  absl::MutexLock lock(&mu_);
  OpTime& row = times_[op];
  if (row.op.empty()) row.op = std::move(op);
  ++row.calls;
  row.total += elapsed;
  return status;
}

absl::Status OpTimingBackend::CopyToDevice(void* dst, const void* host_src, size_t bytes) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->CopyToDevice(dst, host_src, bytes);
  return Timed(start, "CopyToDevice", std::move(s));
}

absl::Status OpTimingBackend::CopyToHost(void* host_dst, const void* src, size_t bytes) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->CopyToHost(host_dst, src, bytes);
  return Timed(start, "CopyToHost", std::move(s));
}

absl::Status OpTimingBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->CopyOnDevice(dst, src, bytes);
  return Timed(start, "CopyOnDevice", std::move(s));
}

absl::Status OpTimingBackend::Zero(void* dst, size_t bytes) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->Zero(dst, bytes);
  return Timed(start, "Zero", std::move(s));
}

absl::Status OpTimingBackend::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                   const float* a, int lda, const float* b, int ldb, float beta,
                                   float* c, int ldc) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return Timed(start,
               absl::StrCat("Gemm", trans_a ? " a^T" : "", trans_b ? " b^T" : "", " m=", m,
                            " n=", n, " k=", k),
               std::move(s));
}

absl::Status OpTimingBackend::EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                               const float* wpe, int B, int T, int C) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->EmbeddingForward(out, tokens, wte, wpe, B, T, C);
  return Timed(start, absl::StrCat("EmbeddingForward B=", B, " T=", T, " C=", C), std::move(s));
}

absl::Status OpTimingBackend::EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                                                const int32_t* tokens, int B, int T, int C) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->EmbeddingBackward(dwte, dwpe, dout, tokens, B, T, C);
  return Timed(start, absl::StrCat("EmbeddingBackward B=", B, " T=", T, " C=", C), std::move(s));
}

absl::Status OpTimingBackend::LayerNormForward(float* out, float* mean, float* rstd,
                                               const float* inp, const float* weight,
                                               const float* bias, int N, int C) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->LayerNormForward(out, mean, rstd, inp, weight, bias, N, C);
  return Timed(start, absl::StrCat("LayerNormForward N=", N, " C=", C), std::move(s));
}

absl::Status OpTimingBackend::LayerNormBackward(float* dinp, float* dweight, float* dbias,
                                                const float* dout, const float* inp,
                                                const float* weight, const float* mean,
                                                const float* rstd, int N, int C) {
  const absl::Time start = absl::Now();
  absl::Status s =
      inner_->LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  return Timed(start, absl::StrCat("LayerNormBackward N=", N, " C=", C), std::move(s));
}

absl::Status OpTimingBackend::MatmulForward(float* out, const float* inp, const float* weight,
                                            const float* bias, int N, int C, int OC) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->MatmulForward(out, inp, weight, bias, N, C, OC);
  return Timed(start,
               absl::StrCat("MatmulForward N=", N, " C=", C, " OC=", OC, bias ? "" : " no bias"),
               std::move(s));
}

absl::Status OpTimingBackend::MatmulBackwardInput(float* dinp, const float* dout,
                                                  const float* weight, int N, int C, int OC,
                                                  bool accumulate) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->MatmulBackwardInput(dinp, dout, weight, N, C, OC, accumulate);
  return Timed(start, absl::StrCat("MatmulBackwardInput N=", N, " C=", C, " OC=", OC),
               std::move(s));
}

absl::Status OpTimingBackend::MatmulBackwardWeight(float* dweight, float* dbias, const float* dout,
                                                   const float* inp, int N, int C, int OC) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->MatmulBackwardWeight(dweight, dbias, dout, inp, N, C, OC);
  return Timed(
      start,
      absl::StrCat("MatmulBackwardWeight N=", N, " C=", C, " OC=", OC, dbias ? "" : " no bias"),
      std::move(s));
}

absl::Status OpTimingBackend::GeluForward(float* out, const float* inp, int64_t n) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->GeluForward(out, inp, n);
  return Timed(start, absl::StrCat("GeluForward n=", n), std::move(s));
}

absl::Status OpTimingBackend::GeluBackward(float* dinp, const float* inp, const float* dout,
                                           int64_t n) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->GeluBackward(dinp, inp, dout, n);
  return Timed(start, absl::StrCat("GeluBackward n=", n), std::move(s));
}

absl::Status OpTimingBackend::AttentionForward(float* out, float* att, const float* qkv, int B,
                                               int T, int C, int NH) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->AttentionForward(out, att, qkv, B, T, C, NH);
  return Timed(start, absl::StrCat("AttentionForward B=", B, " T=", T, " C=", C, " NH=", NH),
               std::move(s));
}

absl::Status OpTimingBackend::AttentionBackward(float* dqkv, float* scratch, const float* dout,
                                                const float* qkv, const float* att, int B, int T,
                                                int C, int NH) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->AttentionBackward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
  return Timed(start, absl::StrCat("AttentionBackward B=", B, " T=", T, " C=", C, " NH=", NH),
               std::move(s));
}

absl::Status OpTimingBackend::ResidualForward(float* out, const float* a, const float* b,
                                              int64_t n) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->ResidualForward(out, a, b, n);
  return Timed(start, absl::StrCat("ResidualForward n=", n), std::move(s));
}

absl::Status OpTimingBackend::ResidualBackward(float* da, float* db, const float* dout, int64_t n) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->ResidualBackward(da, db, dout, n);
  return Timed(start, absl::StrCat("ResidualBackward n=", n), std::move(s));
}

absl::Status OpTimingBackend::CrossEntropyForward(float* losses, float* probs, const float* logits,
                                                  const int32_t* targets, int N, int V) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->CrossEntropyForward(losses, probs, logits, targets, N, V);
  return Timed(start, absl::StrCat("CrossEntropyForward N=", N, " V=", V), std::move(s));
}

absl::Status OpTimingBackend::CrossEntropyBackward(float* dlogits, const float* probs,
                                                   const int32_t* targets, float dloss, int N,
                                                   int V) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->CrossEntropyBackward(dlogits, probs, targets, dloss, N, V);
  return Timed(start, absl::StrCat("CrossEntropyBackward N=", N, " V=", V), std::move(s));
}

absl::Status OpTimingBackend::AdamWUpdate(float* params, const float* grads, float* m, float* v,
                                          int64_t n, const AdamWParams& p) {
  const absl::Time start = absl::Now();
  absl::Status s = inner_->AdamWUpdate(params, grads, m, v, n, p);
  return Timed(start, "AdamWUpdate", std::move(s));
}

absl::StatusOr<double> OpTimingBackend::SquaredNorm(const float* x, int64_t n) {
  const absl::Time start = absl::Now();
  absl::StatusOr<double> norm = inner_->SquaredNorm(x, n);
  absl::Status s = Timed(start, "SquaredNorm", norm.status());
  if (!s.ok()) return s;
  return norm;
}

absl::Status OpTimingBackend::Scale(float* x, float s, int64_t n) {
  const absl::Time start = absl::Now();
  absl::Status status = inner_->Scale(x, s, n);
  return Timed(start, "Scale", std::move(status));
}

}  // namespace dtrain::kernels
