// How often workers heartbeat, and how long their leases last, for a cluster of a given size:
// the operator's --heartbeat_interval and --lease while the cluster's heartbeats stay within
// --max_heartbeat_rate a second; beyond, the interval grows to spread the heartbeats at that
// rate, and the lease grows with it in the same ratio (a worker may miss as many heartbeats
// before it is lost, whatever the size).
//
//   PaceFor({absl::Seconds(1), absl::Seconds(10)}, 50'000, 10'000)  // {5s, 50s}
//   PaceFor({absl::Seconds(1), absl::Seconds(10)}, 2'000, 10'000)   // {1s, 10s}: as configured
//
// The coordinator computes it at every sweep from its live workers and tells every worker the
// interval in each heartbeat answer (HeartbeatResponse.heartbeat_interval_ms), and judges each
// worker's lease by the pace it last told it: a worker heartbeating at the old pace is never
// late by the new one's reckoning.
#ifndef DTRAIN_COORDINATOR_HEARTBEAT_PACE_H_
#define DTRAIN_COORDINATOR_HEARTBEAT_PACE_H_

#include <cstdint>

#include "absl/time/time.h"

namespace dtrain::coordinator {

struct HeartbeatPace {
  absl::Duration interval = absl::Seconds(1);
  absl::Duration lease = absl::Seconds(10);
};

// The pace for `live_workers` (see the top). `max_rate` <= 0: `base` whatever the size. The
// interval is rounded up to whole milliseconds (what the proto carries).
HeartbeatPace PaceFor(const HeartbeatPace& base, int64_t live_workers, double max_rate);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_HEARTBEAT_PACE_H_
