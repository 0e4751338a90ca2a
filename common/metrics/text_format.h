// The Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), as served on /metrics with
// Content-Type kTextContentType.
//
//   # HELP dtrain_coordinator_rpcs_total Coordinator RPCs by method and status code.
//   # TYPE dtrain_coordinator_rpcs_total counter
//   dtrain_coordinator_rpcs_total{method="GetJob",code="OK"} 3
//   # HELP dtrain_coordinator_placement_seconds Time spent computing a placement.
//   # TYPE dtrain_coordinator_placement_seconds histogram
//   dtrain_coordinator_placement_seconds_bucket{le="0.001"} 2
//   dtrain_coordinator_placement_seconds_bucket{le="+Inf"} 2
//   dtrain_coordinator_placement_seconds_sum 0.00042
//   dtrain_coordinator_placement_seconds_count 2
//
// Families are written in the order given (Registry::Collect sorts them by name), children in
// the order given, labels in the family's declared order with a histogram's `le` last.
#ifndef DTRAIN_COMMON_METRICS_TEXT_FORMAT_H_
#define DTRAIN_COMMON_METRICS_TEXT_FORMAT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/metrics/snapshot.h"

namespace dtrain::metrics {

inline constexpr const char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// The shortest text that parses back to `value` (Go's strconv.ParseFloat, as Prometheus reads
// it): "1", "0.25", "1e-06", "+Inf", "-Inf", "NaN".
std::string FormatDouble(double value);

// A label value inside double quotes: backslash, double quote and newline escaped.
std::string EscapeLabelValue(absl::string_view value);
// A HELP text: backslash and newline escaped.
std::string EscapeHelp(absl::string_view help);

// Appends `families` to `out` in the text format; a family without children writes nothing.
void AppendText(absl::Span<const FamilySnapshot> families, std::string* out);
std::string SerializeText(absl::Span<const FamilySnapshot> families);

}  // namespace dtrain::metrics

#endif  // DTRAIN_COMMON_METRICS_TEXT_FORMAT_H_
