#include "common/metrics/metric.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dtrain::metrics {
namespace {

// fetch_add for std::atomic<double> is C++20; a compare-exchange loop does the same.
void AtomicAdd(std::atomic<double>& target, double amount) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Counter::Increment(double amount) {
  if (!(amount > 0)) return;  // negative, zero or NaN
  AtomicAdd(value_, amount);
}

void Gauge::Increment(double amount) { AtomicAdd(value_, amount); }

void Gauge::SetToCurrentTime() { Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  // The first bound >= value: `le` is inclusive. NaN compares false everywhere: +Inf bucket.
  const size_t bucket =
      std::isnan(value) ? bounds_.size()
                        : std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

uint64_t Histogram::Count() const {
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) total += counts_[i].load(std::memory_order_relaxed);
  return total;
}

void Histogram::Collect(ChildSnapshot* out) const {
  out->cumulative_counts.resize(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    out->cumulative_counts[i] = total;
  }
  out->sum = Sum();
}

absl::Status ValidateBuckets(const std::vector<double>& bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    const double b = bounds[i];
    if (std::isnan(b) || b == -INFINITY) {
      return absl::InvalidArgumentError(absl::StrCat("bucket bound ", i, " is ", b));
    }
    if (std::isinf(b) && i + 1 != bounds.size()) {
      return absl::InvalidArgumentError("+Inf may only be the last bucket bound");
    }
    if (i > 0 && !(bounds[i - 1] < b)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket bounds must increase strictly: ", bounds[i - 1], " then ", b, " at ", i));
    }
  }
  return absl::OkStatus();
}

std::vector<double> NormalizeBuckets(std::vector<double> bounds) {
  if (!bounds.empty() && bounds.back() == INFINITY) bounds.pop_back();
  return bounds;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i) bounds.push_back(start + i * width);
  return bounds;
}

std::vector<double> DefaultBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

}  // namespace dtrain::metrics
