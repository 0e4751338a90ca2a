// PauseDetector: tells when the coordinator's own process stopped working for a while (a VM
// stall, a swap storm, SIGSTOP), so that the silence of every worker during that time is not
// taken for their loss.
//
// Every sign of the process working is an observation with a monotonic time: each scheduler
// tick (at most Options::tick apart, so its lateness is the scheduler's lag) and each worker
// RPC. In a working process two observations are never further apart than a tick plus a
// pass. A gap above `threshold` (a heartbeat interval) means nothing in the process ran: a
// pause just ended, and the next observation reports it once.
//
// Not thread-safe: WorkerRegistry calls it under its mutex, so that a pause is noticed, and the
// leases extended, before any lease is judged (worker_registry.h).
#ifndef DTRAIN_COORDINATOR_PAUSE_DETECTOR_H_
#define DTRAIN_COORDINATOR_PAUSE_DETECTOR_H_

#include <functional>
#include <optional>

#include "absl/time/time.h"

namespace dtrain::coordinator {

// A monotonic clock: time since an arbitrary fixed origin (std::chrono::steady_clock).
using MonotonicClock = std::function<absl::Duration()>;
absl::Duration SteadyNow();

class PauseDetector {
 public:
  // `clock` null: never a pause (tests on a fake wall clock that jumps by leases).
  PauseDetector(absl::Duration threshold, MonotonicClock clock)
      : threshold_(threshold), clock_(std::move(clock)) {}

  // Records an observation now; the gap since the previous one when it was above the
  // threshold (a pause of that length just ended), else nullopt. The first observation is
  // never a pause.
  std::optional<absl::Duration> Observe();

  int64_t pauses() const { return pauses_; }
  absl::Duration threshold() const { return threshold_; }

 private:
  const absl::Duration threshold_;
  const MonotonicClock clock_;
  std::optional<absl::Duration> last_;
  int64_t pauses_ = 0;
};

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_PAUSE_DETECTOR_H_
