// The three metric kinds, each one child of a family (registry.h creates them). Updates are
// lock-free (atomics) and safe from any thread; reads see each update whole.
//
//   Counter& submitted = ...;   submitted.Increment();
//   Gauge& queued = ...;        queued.Set(3);
//   Histogram& wait = ...;      wait.Observe(0.25);   // seconds
//
// Buckets are upper bounds (inclusive, as Prometheus' `le`), strictly increasing; +Inf is
// always added at the end and need not be listed.
#ifndef DTRAIN_COMMON_METRICS_METRIC_H_
#define DTRAIN_COMMON_METRICS_METRIC_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics/snapshot.h"

namespace dtrain::metrics {

// A value that only goes up (resets to 0 when the process starts again).
class Counter {
 public:
  static constexpr MetricType kType = MetricType::kCounter;

  // Adds `amount`; a negative or NaN amount is ignored (a counter never goes down).
  void Increment(double amount = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }
  void Collect(ChildSnapshot* out) const { out->value = Value(); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  static constexpr MetricType kType = MetricType::kGauge;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double amount = 1.0);
  void Decrement(double amount = 1.0) { Increment(-amount); }
  void SetToCurrentTime();  // Unix seconds
  double Value() const { return value_.load(std::memory_order_relaxed); }
  void Collect(ChildSnapshot* out) const { out->value = Value(); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into buckets and sums them. Observe is a binary search over the bounds
// plus two atomic adds.
class Histogram {
 public:
  static constexpr MetricType kType = MetricType::kHistogram;

  // `bounds` as accepted by ValidateBuckets (a trailing +Inf already removed).
  explicit Histogram(std::vector<double> bounds);

  // NaN lands in the +Inf bucket (and makes the sum NaN), as in Prometheus' own clients.
  void Observe(double value);
  void Observe(absl::Duration elapsed) { Observe(absl::ToDoubleSeconds(elapsed)); }

  const std::vector<double>& bounds() const { return bounds_; }
  uint64_t Count() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }
  // Cumulative counts per bound, +Inf last, and the sum.
  void Collect(ChildSnapshot* out) const;

 private:
  const std::vector<double> bounds_;
  // Per-bucket (not cumulative) counts, bounds_.size() + 1 of them; the last is +Inf.
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
};

// OK when `bounds` is strictly increasing with no NaN and no -Inf; a last +Inf is allowed
// (and dropped by NormalizeBuckets). Empty is fine: one +Inf bucket.
absl::Status ValidateBuckets(const std::vector<double>& bounds);
std::vector<double> NormalizeBuckets(std::vector<double> bounds);

// start, start*factor, ..., `count` bounds (start > 0, factor > 1, count >= 1).
// ExponentialBuckets(0.001, 2, 16): 1ms .. 32.8s.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// start, start+width, ..., `count` bounds (width > 0).
std::vector<double> LinearBuckets(double start, double width, int count);
// Prometheus' default latency buckets: 0.005 .. 10 seconds.
std::vector<double> DefaultBuckets();

}  // namespace dtrain::metrics

#endif  // DTRAIN_COMMON_METRICS_METRIC_H_
