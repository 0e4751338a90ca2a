#include "client/export_metrics.h"

#include <charconv>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tfevents.h"

namespace dtrain {
namespace client {
namespace {

std::string Shortest(double value) {
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, end.ptr);
}

}  // namespace

absl::StatusOr<std::string> MetricsExport(const std::vector<StepMetrics>& steps,
                                          const std::string& format) {
  if (format == "tfevents") return TfEventsFileOf(steps);
  if (format != "csv") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown format '", format, "' (csv or tfevents)"));
  }
  std::string csv = "step,loss,lr,grad_norm,tokens_per_s,time_unix_ms,val_loss\n";
  for (const StepMetrics& s : steps) {
    absl::StrAppend(&csv, s.step(), ",", Shortest(s.loss()), ",", Shortest(s.learning_rate()), ",",
                    Shortest(s.grad_norm()), ",", Shortest(s.tokens_per_s()), ",", s.time_unix_ms(),
                    ",", s.has_val_loss() ? Shortest(s.val_loss()) : "", "\n");
  }
  return csv;
}

}  // namespace client
}  // namespace dtrain
