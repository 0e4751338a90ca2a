// What the JobManager's files share (job_manager*.cc only): the lock of its jobs, and words
// (durations, worker lists, plurals, job numbers).
#ifndef DTRAIN_COORDINATOR_JOB_MANAGER_INTERNAL_H_
#define DTRAIN_COORDINATOR_JOB_MANAGER_INTERNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/job_paths.h"
#include "coordinator/job_manager.h"

namespace dtrain::coordinator {

// "job-000042" -> 42; -1 for anything else ("job-42" too: common/job_paths.h JobNumberOf).
inline int64_t JobNumber(absl::string_view id) { return JobNumberOf(id).value_or(-1); }

// The queue's order: JobSpec.priority, higher first; then fair share: of two owners
// (Job.owner), the one whose placed jobs hold fewer workers now goes first, so one person's
// burst of jobs does not hold back another's first one; then submission. The scheduler tries
// the queued jobs in it (PlaceQueued), the reservation's holder is the first in it that
// reserves (HolderFor), and Job.queue_position counts the jobs before a job in it
// (QueuePositions). The shares are those when the order is made (JobManager::QueueOrderNow):
// once per scheduler pass, so a pass that places several jobs corrects the order at the next.
class QueueOrder {
 public:
  // `held`: workers held by each owner's jobs that are placed (PLACING, RUNNING, RECOVERING).
  explicit QueueOrder(absl::flat_hash_map<std::string, int64_t> held) : held_(std::move(held)) {}

  bool operator()(const ActiveJob& a, const ActiveJob& b) const {
    if (a.spec.priority() != b.spec.priority()) return a.spec.priority() > b.spec.priority();
    if (a.owner != b.owner) {
      const int64_t held_a = Held(a.owner), held_b = Held(b.owner);
      if (held_a != held_b) return held_a < held_b;
    }
    return JobNumber(a.id) < JobNumber(b.id);
  }
  bool operator()(const ActiveJob* a, const ActiveJob* b) const { return (*this)(*a, *b); }

  int64_t Held(const std::string& owner) const {
    auto it = held_.find(owner);
    return it == held_.end() ? 0 : it->second;
  }

 private:
  absl::flat_hash_map<std::string, int64_t> held_;
};

// "1.5s"
inline std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(d));
}

// "w1, w2, w3" or "w1, ..., w8 and 504 more".
inline std::string WorkerList(const std::vector<std::string>& ids) {
  constexpr size_t kShown = 8;
  if (ids.size() <= kShown) return absl::StrJoin(ids, ", ");
  return absl::StrCat(absl::StrJoin(ids.begin(), ids.begin() + kShown, ", "), " and ",
                      ids.size() - kShown, " more");
}

// The reason of a job submitted while idle workers can run it: the next pass places it.
inline constexpr absl::string_view kPlacingNow = "queued; placing it now";

// "1 worker", "3 workers".
inline std::string Plural(int64_t n, absl::string_view word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

// Holds mu_ and, on release, wakes the watchers of the jobs changed meanwhile, so watcher
// callbacks (store reads, stream writes) never run under mu_.
class JobManager::JobsLock {
 public:
  explicit JobsLock(JobManager* m) ABSL_EXCLUSIVE_LOCK_FUNCTION(m->mu_) : m_(m) { m_->mu_.Lock(); }
  ~JobsLock() ABSL_UNLOCK_FUNCTION() {
    std::vector<std::string> notify, forget;
    notify.swap(m_->to_notify_);
    forget.swap(m_->to_forget_);
    m_->mu_.Unlock();
    for (const std::string& id : notify) m_->notifier_.Notify(id);
    for (const std::string& id : forget) m_->notifier_.Forget(id);
  }

 private:
  JobManager* m_;
};

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_MANAGER_INTERNAL_H_
