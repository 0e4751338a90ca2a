// A registry of metric families, in the shape of prometheus-cpp: a family has a name, a help
// text and a fixed list of label names; its children are the metrics for each combination of
// label values. Everything is thread-safe.
//
//   metrics::Registry registry;
//   ASSIGN_OR_RETURN(metrics::Family<metrics::Histogram>* steps,
//                    registry.AddHistogram("dtrain_worker_step_duration_seconds",
//                                          "Wall time of one training step.", {"job", "rank"},
//                                          metrics::ExponentialBuckets(0.001, 2, 16)));
//   metrics::Histogram& mine = steps->Add({{"job", "job-000001"}, {"rank", "3"}});
//   mine.Observe(0.2);                       // hot path: atomics only, keep the reference
//   steps->Remove({{"job", "job-000001"}, {"rank", "3"}});   // the job ended
//   registry.AddCollectHook([&] { idle->Add({}).Set(CountIdle()); });  // computed per scrape
//   std::string text = registry.SerializeText();                       // what /metrics serves
//
// Names follow Prometheus' rules, checked when a family is added (InvalidArgument naming the
// problem): metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*,
// neither may start with "__" (reserved), label names are distinct, a histogram may not use
// "le", and help is not empty. AlreadyExists when the name, or a histogram's _bucket/_sum/_count
// series, collides with a family already added. See common/metrics/README.md for naming.
#ifndef DTRAIN_COMMON_METRICS_REGISTRY_H_
#define DTRAIN_COMMON_METRICS_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metric.h"
#include "common/metrics/snapshot.h"

namespace dtrain::metrics {

// Label name -> value; must name exactly the family's label names (in any order).
using Labels = std::map<std::string, std::string>;

absl::Status ValidateMetricName(absl::string_view name);
absl::Status ValidateLabelName(absl::string_view name);

// What every family shares; Family<T> adds the children.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Its children, sorted by label values.
  virtual void Collect(FamilySnapshot* out) const = 0;

 protected:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}
  // `labels` as values in label_names() order; InvalidArgument naming a missing or unknown one.
  absl::StatusOr<std::vector<std::string>> ValuesOf(const Labels& labels) const;
  // Says once on stderr that Add was called with bad labels (a programming error).
  void ReportMisuse(const absl::Status& status) const;

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  mutable std::atomic<bool> misuse_reported_{false};
};

template <typename T>
class Family final : public FamilyBase {
 public:
  // The child with these label values, created at first use (0, or an empty histogram). The
  // reference stays valid until that child is removed (or the registry is destroyed): look it
  // up once, then update it without locks. Labels that do not match the family are a
  // programming error: it says so once on stderr and returns a child that is never exported.
  T& Add(const Labels& labels) {
    absl::StatusOr<T*> child = TryAdd(labels);
    if (child.ok()) return **child;
    ReportMisuse(child.status());
    return *unexported_;
  }
  // As Add, with InvalidArgument for labels that do not match the family.
  absl::StatusOr<T*> TryAdd(const Labels& labels) {
    absl::StatusOr<std::vector<std::string>> values = ValuesOf(labels);
    if (!values.ok()) return values.status();
    absl::MutexLock lock(&mu_);
    std::unique_ptr<T>& child = children_[*std::move(values)];
    if (child == nullptr) child = make_();
    return child.get();
  }
  // Removes the child with these labels (its references dangle from now on); false when there
  // was none. A removed child is no longer exported; Add creates a fresh one.
  bool Remove(const Labels& labels) {
    absl::StatusOr<std::vector<std::string>> values = ValuesOf(labels);
    if (!values.ok()) return false;
    absl::MutexLock lock(&mu_);
    return children_.erase(*values) > 0;
  }
  bool Remove(const T* child) {
    absl::MutexLock lock(&mu_);
    for (auto it = children_.begin(); it != children_.end(); ++it) {
      if (it->second.get() == child) {
        children_.erase(it);
        return true;
      }
    }
    return false;
  }
  size_t size() const {
    absl::MutexLock lock(&mu_);
    return children_.size();
  }

  void Collect(FamilySnapshot* out) const override {
    out->name = name();
    out->help = help();
    out->type = T::kType;
    out->label_names = label_names();
    out->bounds = bounds_;
    absl::MutexLock lock(&mu_);
    out->children.clear();
    out->children.reserve(children_.size());
    for (const auto& [values, child] : children_) {
      ChildSnapshot& c = out->children.emplace_back();
      c.label_values = values;
      child->Collect(&c);
    }
  }

 private:
  friend class Registry;
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> bounds, std::function<std::unique_ptr<T>()> make)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names)),
        bounds_(std::move(bounds)),
        make_(std::move(make)),
        unexported_(make_()) {
    // Without labels there is exactly one child: export it (at 0) from the start.
    if (this->label_names().empty()) children_[{}] = make_();
  }

  const std::vector<double> bounds_;  // histograms only
  const std::function<std::unique_ptr<T>()> make_;
  const std::unique_ptr<T> unexported_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Families live as long as the registry; the pointers returned stay valid until then.
  absl::StatusOr<Family<Counter>*> AddCounter(std::string name, std::string help,
                                              std::vector<std::string> label_names = {});
  absl::StatusOr<Family<Gauge>*> AddGauge(std::string name, std::string help,
                                          std::vector<std::string> label_names = {});
  // `buckets`: see ValidateBuckets (metric.h); DefaultBuckets() when in doubt.
  absl::StatusOr<Family<Histogram>*> AddHistogram(std::string name, std::string help,
                                                  std::vector<std::string> label_names,
                                                  std::vector<double> buckets);

  // `hook` runs at the start of every Collect, before the families are read, so it can set
  // gauges from state that is cheaper to compute per scrape than to track (workers by state).
  // Hooks run one scrape at a time, in the order added; a hook must not call Collect,
  // SerializeText or Add/RemoveCollectHook. Returns an id for RemoveCollectHook, which waits for
  // a scrape in progress, so after it returns the hook never runs again.
  using HookId = int64_t;
  HookId AddCollectHook(std::function<void()> hook);
  void RemoveCollectHook(HookId id);

  // Runs the hooks, then snapshots every family, sorted by name.
  std::vector<FamilySnapshot> Collect();
  // Collect() in the text exposition format (text_format.h).
  std::string SerializeText();

 private:
  // Validates and reserves the names `family` would expose, then keeps it.
  absl::Status Insert(std::unique_ptr<FamilyBase> family, bool histogram);

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> series_names_ ABSL_GUARDED_BY(mu_);  // incl. _bucket etc.

  absl::Mutex collect_mu_;  // one scrape at a time; guards the hooks
  HookId next_hook_ ABSL_GUARDED_BY(collect_mu_) = 1;
  std::map<HookId, std::function<void()>> hooks_ ABSL_GUARDED_BY(collect_mu_);
};

}  // namespace dtrain::metrics

#endif  // DTRAIN_COMMON_METRICS_REGISTRY_H_
