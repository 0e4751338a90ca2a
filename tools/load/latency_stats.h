// Latency samples and their percentiles, for the load tools.
//
//   LatencyStats s;
//   s.Add(1.5); s.Add(0.7);             // milliseconds
//   Summary m = s.Summarize();          // m.count 2, m.p50 0.7, m.p99 1.5
#ifndef DTRAIN_TOOLS_LOAD_LATENCY_STATS_H_
#define DTRAIN_TOOLS_LOAD_LATENCY_STATS_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dtrain::load {

// The p-th percentile (0 <= p <= 100) of `samples` by the nearest-rank method: the smallest
// sample with at least p% of the samples at or below it. 0 for no samples. Sorts `samples`.
double Percentile(std::vector<double>& samples, double p);

struct Summary {
  int64_t count = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

// Thread-safe collection of samples (any unit; the tools use milliseconds).
class LatencyStats {
 public:
  void Add(double sample);
  // The samples so far; Reset() starts a new window.
  Summary Summarize() const;
  void Reset();

 private:
  mutable absl::Mutex mu_;
  std::vector<double> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dtrain::load

#endif  // DTRAIN_TOOLS_LOAD_LATENCY_STATS_H_
