#include "common/metrics/text_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"

namespace dtrain::metrics {
namespace {

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"}` from the family's names and a child's values, with an optional extra pair
// (a histogram's le) last; nothing when there are no labels at all.
void AppendLabels(const FamilySnapshot& family, const ChildSnapshot& child,
                  absl::string_view extra_name, absl::string_view extra_value, std::string* out) {
  const size_t n = std::min(family.label_names.size(), child.label_values.size());
  if (n == 0 && extra_name.empty()) return;
  out->push_back('{');
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out->push_back(',');
    absl::StrAppend(out, family.label_names[i], "=\"", EscapeLabelValue(child.label_values[i]),
                    "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(out, n > 0 ? "," : "", extra_name, "=\"", extra_value, "\"");
  }
  out->push_back('}');
}

void AppendSample(const FamilySnapshot& family, const ChildSnapshot& child,
                  absl::string_view suffix, absl::string_view extra_name,
                  absl::string_view extra_value, const std::string& value, std::string* out) {
  absl::StrAppend(out, family.name, suffix);
  AppendLabels(family, child, extra_name, extra_value, out);
  absl::StrAppend(out, " ", value, "\n");
}

}  // namespace

std::string FormatDouble(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  // Shortest round-trip form ("0.1", "1e+20"); every such form is valid for ParseFloat.
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, r.ptr);
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void AppendText(absl::Span<const FamilySnapshot> families, std::string* out) {
  for (const FamilySnapshot& family : families) {
    if (family.children.empty()) continue;
    absl::StrAppend(out, "# HELP ", family.name, " ", EscapeHelp(family.help), "\n");
    absl::StrAppend(out, "# TYPE ", family.name, " ", TypeName(family.type), "\n");
    for (const ChildSnapshot& child : family.children) {
      if (family.type != MetricType::kHistogram) {
        AppendSample(family, child, "", "", "", FormatDouble(child.value), out);
        continue;
      }
      // Buckets: one per bound, then +Inf; the last cumulative count is also _count.
      uint64_t count = 0;
      for (size_t i = 0; i <= family.bounds.size(); ++i) {
        if (i < child.cumulative_counts.size()) count = child.cumulative_counts[i];
        const std::string le = i < family.bounds.size() ? FormatDouble(family.bounds[i]) : "+Inf";
        AppendSample(family, child, "_bucket", "le", le, absl::StrCat(count), out);
      }
      AppendSample(family, child, "_sum", "", "", FormatDouble(child.sum), out);
      AppendSample(family, child, "_count", "", "", absl::StrCat(count), out);
    }
  }
}

std::string SerializeText(absl::Span<const FamilySnapshot> families) {
  std::string out;
  AppendText(families, &out);
  return out;
}

}  // namespace dtrain::metrics
