#include "coordinator/heartbeat_pace.h"

#include <cmath>

namespace dtrain::coordinator {

HeartbeatPace PaceFor(const HeartbeatPace& base, int64_t live_workers, double max_rate) {
  if (max_rate <= 0 || live_workers <= 0) return base;
  // live / interval heartbeats a second must stay <= max_rate.
  const double needed_ms = std::ceil(1000.0 * static_cast<double>(live_workers) / max_rate);
  const double base_ms = absl::ToDoubleMilliseconds(base.interval);
  if (needed_ms <= base_ms) return base;
  const double ratio = needed_ms / base_ms;
  return {absl::Milliseconds(needed_ms), base.lease * ratio};
}

}  // namespace dtrain::coordinator
