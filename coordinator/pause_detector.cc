#include "coordinator/pause_detector.h"

#include <chrono>

namespace dtrain::coordinator {

absl::Duration SteadyNow() {
  return absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

std::optional<absl::Duration> PauseDetector::Observe() {
  if (!clock_) return std::nullopt;
  const absl::Duration now = clock_();
  std::optional<absl::Duration> gap;
  if (last_.has_value() && now - *last_ > threshold_) {
    gap = now - *last_;
    ++pauses_;
  }
  if (!last_.has_value() || now > *last_) last_ = now;
  return gap;
}

}  // namespace dtrain::coordinator
