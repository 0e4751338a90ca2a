#include "common/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "prometheus/check_names.h"
#include "prometheus/text_serializer.h"

namespace dtrain::metrics {
namespace {

absl::Status Invalid(const std::string& family, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("metric family \"", family, "\": ", what));
}

absl::Status CheckBuckets(const std::string& family, const Buckets& buckets) {
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (std::isnan(buckets[i]) || (i > 0 && !(buckets[i - 1] < buckets[i]))) {
      return Invalid(family, absl::StrCat("bucket bounds must increase strictly (bound ", i, " is ",
                                          buckets[i], ")"));
    }
  }
  return absl::OkStatus();
}

// Where `label` goes in a family declared with `names`: its index, undeclared ones last.
size_t Rank(const std::vector<std::string>& names, const std::string& label) {
  return std::find(names.begin(), names.end(), label) - names.begin();
}

}  // namespace

Buckets ExponentialBuckets(double start, double factor, int count) {
  Buckets bounds;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

absl::Status Registry::Reserve(const std::string& name, const std::string& help,
                               const std::vector<std::string>& label_names, bool histogram) {
  if (!prometheus::CheckMetricName(name)) {
    return Invalid(name, "not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*, no \"__\" prefix)");
  }
  if (help.empty()) return Invalid(name, "help text is empty");
  if (help.find_first_of("\\\n") != std::string::npos) {
    return Invalid(name, "help text has a newline or backslash (written unescaped)");
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& label : label_names) {
    if (!prometheus::CheckLabelName(label)) {
      return Invalid(name, absl::StrCat("\"", label,
                                        "\" is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, no "
                                        "\"__\" prefix)"));
    }
    if (histogram && label == "le") {
      return Invalid(name, "label name \"le\" is reserved for histogram buckets");
    }
    if (!seen.insert(label).second) {
      return Invalid(name, absl::StrCat("label name \"", label, "\" appears twice"));
    }
  }
  absl::MutexLock lock(&mu_);
  if (!label_names_.emplace(name, label_names).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("metric family \"", name, "\" is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Family<Counter>*> Registry::AddCounter(const std::string& name,
                                                      const std::string& help,
                                                      std::vector<std::string> label_names) {
  RETURN_IF_ERROR(Reserve(name, help, label_names, /*histogram=*/false));
  Family<Counter>& family = prometheus::BuildCounter().Name(name).Help(help).Register(registry_);
  if (label_names.empty()) family.Add({});
  return &family;
}

absl::StatusOr<Family<Gauge>*> Registry::AddGauge(const std::string& name, const std::string& help,
                                                  std::vector<std::string> label_names) {
  RETURN_IF_ERROR(Reserve(name, help, label_names, /*histogram=*/false));
  Family<Gauge>& family = prometheus::BuildGauge().Name(name).Help(help).Register(registry_);
  if (label_names.empty()) family.Add({});
  return &family;
}

absl::StatusOr<Family<Histogram>*> Registry::AddHistogram(const std::string& name,
                                                          const std::string& help,
                                                          std::vector<std::string> label_names,
                                                          const Buckets& buckets) {
  RETURN_IF_ERROR(CheckBuckets(name, buckets));
  RETURN_IF_ERROR(Reserve(name, help, label_names, /*histogram=*/true));
  Family<Histogram>& family =
      prometheus::BuildHistogram().Name(name).Help(help).Register(registry_);
  if (label_names.empty()) family.Add({}, buckets);
  return &family;
}

Registry::HookId Registry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&collect_mu_);
  const HookId id = next_hook_++;
  hooks_.emplace(id, std::move(hook));
  return id;
}

void Registry::RemoveCollectHook(HookId id) {
  absl::MutexLock lock(&collect_mu_);
  hooks_.erase(id);
}

std::vector<prometheus::MetricFamily> Registry::Collect() {
  std::vector<prometheus::MetricFamily> families;
  {
    absl::MutexLock collect_lock(&collect_mu_);
    for (auto& [id, hook] : hooks_) hook();
    families = registry_.Collect();
  }
  absl::MutexLock lock(&mu_);
  for (prometheus::MetricFamily& family : families) {
    const std::vector<std::string>& names = label_names_[family.name];
    for (prometheus::ClientMetric& child : family.metric) {
      std::stable_sort(child.label.begin(), child.label.end(),
                       [&names](const auto& a, const auto& b) {
                         return Rank(names, a.name) < Rank(names, b.name);
                       });
    }
    // Label names now line up across children: comparing the label lists compares the values.
    std::sort(family.metric.begin(), family.metric.end(),
              [](const auto& a, const auto& b) { return a.label < b.label; });
  }
  std::sort(families.begin(), families.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return families;
}

std::string Registry::SerializeText() { return prometheus::TextSerializer().Serialize(Collect()); }

}  // namespace dtrain::metrics
