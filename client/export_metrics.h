// `dtrain export-metrics JOB --format=csv|tfevents [-o FILE]`: an ended job's scalars, one row
// or event per step, from its history as the coordinator keeps it (the steps WatchJob replays).
//
// csv: a header "step,loss,lr,grad_norm,tokens_per_s,time_unix_ms", then one line per step,
// numbers in their shortest round-trip form. tfevents: a TensorBoard event file
// (common/tfevents.h), the same records the job's reporting rank writes into the job's directory
// as it trains.
#ifndef DTRAIN_CLIENT_EXPORT_METRICS_H_
#define DTRAIN_CLIENT_EXPORT_METRICS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace dtrain {
namespace client {

// InvalidArgument for a format other than csv or tfevents.
absl::StatusOr<std::string> MetricsExport(const std::vector<StepMetrics>& steps,
                                          const std::string& format);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_EXPORT_METRICS_H_
