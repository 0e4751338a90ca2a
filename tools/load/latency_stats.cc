#include "tools/load/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dtrain::load {

double Percentile(std::vector<double>& samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  // Nearest rank: ceil(p/100 * n), 1-based; p = 0 gives the minimum.
  const double rank = std::ceil(p / 100.0 * static_cast<double>(samples.size()));
  const size_t index = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return samples[std::min(index, samples.size() - 1)];
}

void LatencyStats::Add(double sample) {
  absl::MutexLock lock(&mu_);
  samples_.push_back(sample);
}

Summary LatencyStats::Summarize() const {
  std::vector<double> copy;
  {
    absl::MutexLock lock(&mu_);
    copy = samples_;
  }
  Summary s;
  s.count = static_cast<int64_t>(copy.size());
  if (copy.empty()) return s;
  s.mean = std::accumulate(copy.begin(), copy.end(), 0.0) / static_cast<double>(copy.size());
  s.p50 = Percentile(copy, 50);
  s.p90 = Percentile(copy, 90);
  s.p99 = Percentile(copy, 99);
  s.max = copy.back();
  return s;
}

void LatencyStats::Reset() {
  absl::MutexLock lock(&mu_);
  samples_.clear();
}

}  // namespace dtrain::load
