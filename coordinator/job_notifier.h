// JobNotifier: wakes the watchers of a job when something new about it has been committed.
//
// Each job has a version that Notify() bumps. A watcher reads Version(), reads the store, and
// when it found nothing new calls WaitOnce(job, version, callback): if the version already moved
// the callback is not stored and WaitOnce returns false (read again); otherwise the callback runs
// once, on the thread of the next Notify() or Shutdown(), outside every lock here. So a change
// committed between the read and WaitOnce is never missed.
//
//   uint64_t v = notifier.Version(id);
//   ... read the store, nothing new ...
//   if (!notifier.WaitOnce(id, v, [this] { Pump(); }, &token)) Pump();
//   ... on teardown: if (notifier.Cancel(token)) { the callback will never run }
#ifndef DTRAIN_COORDINATOR_JOB_NOTIFIER_H_
#define DTRAIN_COORDINATOR_JOB_NOTIFIER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dtrain::coordinator {

class JobNotifier {
 public:
  using Token = uint64_t;

  uint64_t Version(absl::string_view job_id) const;
  // Bumps the job's version and runs (then forgets) its waiting callbacks.
  void Notify(absl::string_view job_id);
  // See the header comment. Returns false, storing nothing, once Shutdown() has run.
  bool WaitOnce(absl::string_view job_id, uint64_t seen_version, std::function<void()> callback,
                Token* token);
  // Forgets a stored callback; true when it was still stored (so it will never run).
  bool Cancel(Token token);
  // Runs every stored callback and refuses new waits; watchers then see is_shut_down().
  void Shutdown();
  bool is_shut_down() const;
  // Drops a job's entry unless callbacks wait on it; called when a job ends, so memory stays
  // bounded by live jobs. Safe: versions are never reused, so a watcher that read a version
  // before Forget sees a different one after it and reads again.
  void Forget(absl::string_view job_id);

 private:
  struct Waiter {
    Token token;
    std::function<void()> callback;
  };
  struct PerJob {
    uint64_t version = 0;
    std::vector<Waiter> waiters;
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, PerJob> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Token, std::string> token_job_ ABSL_GUARDED_BY(mu_);
  Token next_token_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t last_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_NOTIFIER_H_
