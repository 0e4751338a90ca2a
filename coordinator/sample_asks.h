// SampleAsks: the samples (SampleJob) waiting for the worker asked to draw them.
//
// Each ask goes once in its worker's next heartbeat answer (HeartbeatResponse.samples) and ends
// with the worker's answer (HeartbeatRequest.samples_drawn), at its deadline, or when its worker
// is no longer live, whichever comes first; `done` hears which. Nothing is kept after: a sample
// is not stored, and a coordinator restart ends the waits (the callers' calls end with it).
//
//   SampleAsks asks;
//   RETURN_IF_ERROR(asks.Ask("w1", ask, deadline, [](absl::StatusOr<SampleDrawn> d) {...}));
//   for (SampleAsk& a : asks.ForWorker("w1")) ...             // a heartbeat answer
//   asks.Answer("w1", drawn);                                 // a heartbeat
//   asks.Expire(now, is_live);                                // a scheduler pass
//
// Thread-safe, its own mutex, never held while calling out. empty() is one atomic load: a
// heartbeat pays nothing while no sample is asked.
#ifndef DTRAIN_COORDINATOR_SAMPLE_ASKS_H_
#define DTRAIN_COORDINATOR_SAMPLE_ASKS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

class SampleAsks {
 public:
  // A worker draws one sample at a time; more wait behind it on the worker, up to this many.
  static constexpr int kMaxPerWorker = 2;
  using Done = std::function<void(absl::StatusOr<SampleDrawn>)>;

  // Asks `worker_id` for `ask` (its ask_id is set here) and calls `done` once (from the thread
  // of the answer's heartbeat or of Expire, no lock held): with the worker's SampleDrawn, or
  // DeadlineExceeded past `deadline`, or Unavailable once the worker is not live.
  // ResourceExhausted (and `done` never called) while `worker_id` has kMaxPerWorker open.
  absl::Status Ask(const std::string& worker_id, SampleAsk ask, absl::Time deadline, Done done);
  bool empty() const { return open_.load(std::memory_order_acquire) == 0; }
  // The asks of `worker_id` not sent yet; each counts as sent now.
  std::vector<SampleAsk> ForWorker(const std::string& worker_id);
  // A worker's answer; one from another worker than the one asked, or for an ask that has
  // ended, is dropped (false).
  bool Answer(const std::string& worker_id, const SampleDrawn& drawn);
  // Ends the asks past their deadline and those whose worker `is_live` says is gone.
  // `is_live` is called without the lock held.
  void Expire(absl::Time now, absl::FunctionRef<bool(const std::string&)> is_live);
  // Ends the asks sent to `worker_id` (Unavailable naming it): a new session of the worker
  // registered, so the process that had them is gone. Those not sent yet go to the new one.
  void EndSent(const std::string& worker_id);
  // Ends every ask (Unavailable: the coordinator is stopping).
  void EndAll(const std::string& why);

 private:
  struct Open {
    std::string worker_id;
    SampleAsk ask;
    absl::Time deadline;
    bool sent = false;
    Done done;
  };
  // Removes the asks `pick` chooses and calls their `done` with `result(open)`, unlocked.
  void EndIf(const std::function<bool(const Open&)>& pick,
             const std::function<absl::StatusOr<SampleDrawn>(const Open&)>& result);

  std::atomic<int> open_{0};
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Open> asks_ ABSL_GUARDED_BY(mu_);  // by ask id
};

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_SAMPLE_ASKS_H_
