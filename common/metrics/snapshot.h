// A point-in-time copy of metric families: what Registry::Collect produces and the text format
// (text_format.h) serializes. Plain data, so the format can be tested on hand-built values.
#ifndef DTRAIN_COMMON_METRICS_SNAPSHOT_H_
#define DTRAIN_COMMON_METRICS_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// One child of a family: its label values (in the family's label-name order) and its value.
struct ChildSnapshot {
  std::vector<std::string> label_values;
  double value = 0;  // counter, gauge
  // Histogram: cumulative counts, one per upper bound of the family and a last one for +Inf
  // (which is also the count); sum of the observed values.
  std::vector<uint64_t> cumulative_counts;
  double sum = 0;
};

struct FamilySnapshot {
  std::string name;
  std::string help;
  MetricType type = MetricType::kCounter;
  std::vector<std::string> label_names;
  std::vector<double> bounds;  // histogram upper bounds, increasing, +Inf not included
  std::vector<ChildSnapshot> children;
};

}  // namespace dtrain::metrics

#endif  // DTRAIN_COMMON_METRICS_SNAPSHOT_H_
