#include "common/metrics/registry.h"

#include <algorithm>
#include <cstdio>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/metrics/text_format.h"
#include "common/status_macros.h"

namespace dtrain::metrics {
namespace {

bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// `family "name": ` before every creation error.
absl::Status Invalid(absl::string_view family, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("metric family \"", family, "\": ", what));
}

absl::Status ValidateFamily(absl::string_view name, absl::string_view help,
                            const std::vector<std::string>& label_names, bool histogram) {
  if (absl::Status s = ValidateMetricName(name); !s.ok()) return Invalid(name, s.message());
  if (help.empty()) return Invalid(name, "help text is empty");
  absl::flat_hash_set<absl::string_view> seen;
  for (const std::string& label : label_names) {
    if (absl::Status s = ValidateLabelName(label); !s.ok()) return Invalid(name, s.message());
    if (histogram && label == "le") {
      return Invalid(name, "label name \"le\" is reserved for histogram buckets");
    }
    if (!seen.insert(label).second) {
      return Invalid(name, absl::StrCat("label name \"", label, "\" appears twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateMetricName(absl::string_view name) {
  bool ok = !name.empty() && (IsLetter(name[0]) || name[0] == '_' || name[0] == ':');
  for (char c : name) ok = ok && (IsLetter(c) || IsDigit(c) || c == '_' || c == ':');
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name \"", name, "\" does not match [a-zA-Z_:][a-zA-Z0-9_:]*"));
  }
  if (absl::StartsWith(name, "__")) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name \"", name, "\" starts with the reserved \"__\""));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelName(absl::string_view name) {
  bool ok = !name.empty() && (IsLetter(name[0]) || name[0] == '_');
  for (char c : name) ok = ok && (IsLetter(c) || IsDigit(c) || c == '_');
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("label name \"", name, "\" does not match [a-zA-Z_][a-zA-Z0-9_]*"));
  }
  if (absl::StartsWith(name, "__")) {
    return absl::InvalidArgumentError(
        absl::StrCat("label name \"", name, "\" starts with the reserved \"__\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FamilyBase::ValuesOf(const Labels& labels) const {
  std::vector<std::string> values;
  values.reserve(label_names_.size());
  for (const std::string& label : label_names_) {
    auto it = labels.find(label);
    if (it == labels.end()) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": label \"", label,
                                                     "\" has no value; the family's labels are {",
                                                     absl::StrJoin(label_names_, ", "), "}"));
    }
    values.push_back(it->second);
  }
  if (labels.size() != label_names_.size()) {
    for (const auto& [label, value] : labels) {
      if (std::find(label_names_.begin(), label_names_.end(), label) == label_names_.end()) {
        return absl::InvalidArgumentError(absl::StrCat(name_, ": unknown label \"", label,
                                                       "\"; the family's labels are {",
                                                       absl::StrJoin(label_names_, ", "), "}"));
      }
    }
  }
  return values;
}

void FamilyBase::ReportMisuse(const absl::Status& status) const {
  if (misuse_reported_.exchange(true)) return;
  std::fprintf(stderr, "metrics: Add with bad labels (not exported): %s\n",
               std::string(status.message()).c_str());
}

absl::Status Registry::Insert(std::unique_ptr<FamilyBase> family, bool histogram) {
  const std::string& name = family->name();
  std::vector<std::string> series = {name};
  if (histogram) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) series.push_back(name + suffix);
  }
  absl::MutexLock lock(&mu_);
  for (const std::string& s : series) {
    if (series_names_.contains(s)) {
      return absl::AlreadyExistsError(absl::StrCat("metric family \"", name, "\": series \"", s,
                                                   "\" already exported by another family"));
    }
  }
  series_names_.insert(series.begin(), series.end());
  families_.emplace(name, std::move(family));
  return absl::OkStatus();
}

absl::StatusOr<Family<Counter>*> Registry::AddCounter(std::string name, std::string help,
                                                      std::vector<std::string> label_names) {
  RETURN_IF_ERROR(ValidateFamily(name, help, label_names, /*histogram=*/false));
  auto* family = new Family<Counter>(std::move(name), std::move(help), std::move(label_names), {},
                                     [] { return std::make_unique<Counter>(); });
  RETURN_IF_ERROR(Insert(std::unique_ptr<FamilyBase>(family), /*histogram=*/false));
  return family;
}

absl::StatusOr<Family<Gauge>*> Registry::AddGauge(std::string name, std::string help,
                                                  std::vector<std::string> label_names) {
  RETURN_IF_ERROR(ValidateFamily(name, help, label_names, /*histogram=*/false));
  auto* family = new Family<Gauge>(std::move(name), std::move(help), std::move(label_names), {},
                                   [] { return std::make_unique<Gauge>(); });
  RETURN_IF_ERROR(Insert(std::unique_ptr<FamilyBase>(family), /*histogram=*/false));
  return family;
}

absl::StatusOr<Family<Histogram>*> Registry::AddHistogram(std::string name, std::string help,
                                                          std::vector<std::string> label_names,
                                                          std::vector<double> buckets) {
  RETURN_IF_ERROR(ValidateFamily(name, help, label_names, /*histogram=*/true));
  if (absl::Status s = ValidateBuckets(buckets); !s.ok()) return Invalid(name, s.message());
  std::vector<double> bounds = NormalizeBuckets(std::move(buckets));
  auto* family =
      new Family<Histogram>(std::move(name), std::move(help), std::move(label_names), bounds,
                            [bounds] { return std::make_unique<Histogram>(bounds); });
  RETURN_IF_ERROR(Insert(std::unique_ptr<FamilyBase>(family), /*histogram=*/true));
  return family;
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

std::vector<FamilySnapshot> Registry::Collect() {
  absl::MutexLock collect_lock(&collect_mu_);
  for (auto& [id, hook] : hooks_) hook();
  std::vector<const FamilyBase*> families;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, family] : families_) families.push_back(family.get());
  }
  // families_ is a std::map: already sorted by name. Families are never removed, so the
  // pointers stay valid without mu_.
  std::vector<FamilySnapshot> out(families.size());
  for (size_t i = 0; i < families.size(); ++i) families[i]->Collect(&out[i]);
  return out;
}

std::string Registry::SerializeText() { return metrics::SerializeText(Collect()); }

}  // namespace dtrain::metrics
