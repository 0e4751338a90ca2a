// A few threads of our own for work that must not run on gRPC's callback threads: a submit's
// parse, validation and plan. gRPC runs every handler of the service on a small shared pool;
// work that takes long there delays every other call, heartbeats included, and a worker whose
// heartbeats wait is declared lost. Here a slow submit waits only for other submits.
//
//   BoundedExecutor submits(/*threads=*/2, /*max_queued=*/64);
//   if (absl::Status s = submits.Schedule([=] { ...; reactor->Finish(...); }); !s.ok()) {
//     reactor->Finish(ToGrpcStatus(s));  // Unavailable: busy or stopping
//   }
//   submits.Stop();  // runs what is queued, then joins
#ifndef DTRAIN_COORDINATOR_BOUNDED_EXECUTOR_H_
#define DTRAIN_COORDINATOR_BOUNDED_EXECUTOR_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace dtrain::coordinator {

class BoundedExecutor {
 public:
  BoundedExecutor(int threads, int max_queued);
  ~BoundedExecutor();  // Stop()

  BoundedExecutor(const BoundedExecutor&) = delete;
  BoundedExecutor& operator=(const BoundedExecutor&) = delete;

  // Queues `task` for one of the threads. Unavailable when max_queued tasks are already
  // waiting ("N requests of this kind are waiting; retry") or after Stop().
  absl::Status Schedule(std::function<void()> task);

  // Refuses new tasks, runs the queued ones, joins the threads. Idempotent.
  void Stop();

 private:
  void Loop();

  const int max_queued_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_BOUNDED_EXECUTOR_H_
