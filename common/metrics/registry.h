// dtrain's metrics are prometheus-cpp's (Debian's prometheus-cpp-dev 1.0.1): families and the
// Counter, Gauge and Histogram children are prometheus::Family<T> and prometheus::Counter etc.,
// serialized by prometheus::TextSerializer and served by prometheus::Exposer (http_exporter.h).
// This Registry is the glue around prometheus::Registry, for what 1.0.1 does not do:
//   - errors as absl::Status, not exceptions: names, label names and help are checked before
//     prometheus-cpp sees them (it throws std::invalid_argument); a name taken twice is
//     AlreadyExists instead of a silent merge;
//   - collect hooks: gauges computed from state at each scrape (workers by state);
//   - a stable page: labels in the order the family declares them, children sorted by their
//     label values and families by name (prometheus-cpp orders label names alphabetically and
//     keeps children in a hash map), so the page reads like the README tables and diffs well.
//
//   metrics::Registry registry;
//   ASSIGN_OR_RETURN(metrics::Family<metrics::Histogram>* steps,
//                    registry.AddHistogram("dtrain_worker_step_duration_seconds",
//                                          "Wall time of one training step.", {"job_id", "rank"},
//                                          StepBuckets()));
//   metrics::Histogram& mine = steps->Add({{"job_id", "job-000001"}, {"rank", "3"}},
//                                         StepBuckets());  // prometheus-cpp takes them per child
//   mine.Observe(0.2);                      // hot path: prometheus-cpp's atomics, keep the ref
//   steps->Remove(&mine);                   // the job ended (mine dangles)
//   registry.AddCollectHook([&] { idle->Add({}).Set(CountIdle()); });   // computed per scrape
//   std::string text = registry.SerializeText();                        // what /metrics serves
//
// Checked when a family is added (InvalidArgument naming the family): the metric name and label
// names by prometheus-cpp's rules (prometheus::CheckMetricName / CheckLabelName: no "__"
// prefix), label names distinct, no "le" on a histogram, help not empty and on one line without
// backslashes (1.0.1 writes HELP unescaped), buckets strictly increasing. Add on a family with
// labels that are not the declared ones is a programming error prometheus-cpp does not catch:
// the series is exported with those labels. See common/metrics/README.md for naming.
#ifndef DTRAIN_COMMON_METRICS_REGISTRY_H_
#define DTRAIN_COMMON_METRICS_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace dtrain::metrics {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using Labels = prometheus::Labels;                        // label name -> value
using Buckets = prometheus::Histogram::BucketBoundaries;  // upper bounds; +Inf is implied

// start, start*factor, ..., `count` bounds. ExponentialBuckets(0.001, 2, 16): 1ms .. 32.8s.
Buckets ExponentialBuckets(double start, double factor, int count);

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Families live as long as the registry. A family without labels exports its one child (at
  // 0) from the start; a family with labels exports the children added.
  absl::StatusOr<Family<Counter>*> AddCounter(const std::string& name, const std::string& help,
                                              std::vector<std::string> label_names = {});
  absl::StatusOr<Family<Gauge>*> AddGauge(const std::string& name, const std::string& help,
                                          std::vector<std::string> label_names = {});
  // `buckets` are checked here; pass the same list to Family<Histogram>::Add.
  absl::StatusOr<Family<Histogram>*> AddHistogram(const std::string& name, const std::string& help,
                                                  std::vector<std::string> label_names,
                                                  const Buckets& buckets);

  // `hook` runs at the start of every Collect, before the families are read. Hooks run one
  // scrape at a time, in the order added; a hook must not call Collect or the hook functions.
  // RemoveCollectHook waits for a scrape in progress: once it returns the hook never runs again.
  using HookId = int64_t;
  HookId AddCollectHook(std::function<void()> hook);
  void RemoveCollectHook(HookId id);

  // Runs the hooks, then prometheus-cpp's Collect, put in the stable order described above.
  std::vector<prometheus::MetricFamily> Collect();
  // Collect() through prometheus::TextSerializer: the text format 0.0.4 that /metrics serves.
  std::string SerializeText();

 private:
  // Checks `name`, `help` and `label_names` and reserves the name; AlreadyExists when taken.
  absl::Status Reserve(const std::string& name, const std::string& help,
                       const std::vector<std::string>& label_names, bool histogram);

  prometheus::Registry registry_;
  absl::Mutex mu_;
  std::map<std::string, std::vector<std::string>> label_names_ ABSL_GUARDED_BY(mu_);  // by family

  absl::Mutex collect_mu_;  // one scrape at a time; guards the hooks
  HookId next_hook_ ABSL_GUARDED_BY(collect_mu_) = 1;
  std::map<HookId, std::function<void()>> hooks_ ABSL_GUARDED_BY(collect_mu_);
};

}  // namespace dtrain::metrics

#endif  // DTRAIN_COMMON_METRICS_REGISTRY_H_
