#include "worker/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dtrain::model {

absl::Status Validate(const SamplingOptions& options) {
  if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature=", options.temperature, " must be 0 (greedy) or positive"));
  }
  if (options.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k=", options.top_k, " must be 0 (every token) or positive"));
  }
  return absl::OkStatus();
}

int32_t Sampler::Pick(absl::Span<const float> logits) {
  const int V = static_cast<int>(logits.size());
  if (options_.temperature == 0.0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates: every id, or the k of largest logit (ties: the lower id first).
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  const auto larger = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (options_.top_k > 0 && options_.top_k < V) {
    std::partial_sort(ids.begin(), ids.begin() + options_.top_k, ids.end(), larger);
    ids.resize(options_.top_k);
  }
  // softmax(logits / temperature) over the candidates, in double.
  const float max = logits[*std::min_element(ids.begin(), ids.end(), larger)];
  std::vector<double> weights(ids.size());
  double sum = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    weights[i] = std::exp((static_cast<double>(logits[ids[i]]) - max) / options_.temperature);
    sum += weights[i];
  }
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;  // uniform in [0, sum)
  double cumulative = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    cumulative += weights[i];
    if (u < cumulative) return ids[i];
  }
  return ids.back();  // u within rounding of sum
}

}  // namespace dtrain::model
