// DirRemovals: the directories of deleted jobs (DeleteJob with files) that a worker is still to
// remove, which worker gets each in its heartbeat answer, and the answers DeleteJob waits for.
//
// A removal is assigned to the worker that ran the job's rank 0 (it saw the directory and its
// roots hold it); once that worker is not live, the scheduler pass (Reassign) gives it to a
// live worker on the same host. It goes in its assigned worker's heartbeat answers, again after
// `resend_after` without an answer (a lost answer, a worker that died while removing). The durable
// copy is the store's dir_removals table: the job manager adds each removal there first and
// restores them at start.
//
//   DirRemovals removals(absl::Seconds(10));
//   removals.Add(pending);
//   for (JobDirRemoval& r : removals.ForWorker("w1", now)) ...   // a heartbeat
//   removals.Reassign(now, is_live, live_on_host);                // a scheduler pass
//   std::optional<PendingDirRemoval> done = removals.Answer(answer);  // then store + log
//   removals.OnAnswer("job-000003", deadline, [](std::optional<JobDirRemoved> seen) {...});
//
// Thread-safe, its own mutex, which is never held while calling out. empty() is one atomic
// load: a heartbeat pays nothing while no removal is pending.
#ifndef DTRAIN_COORDINATOR_DIR_REMOVALS_H_
#define DTRAIN_COORDINATOR_DIR_REMOVALS_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/job_store.h"
#include "plan/dir_removal_text.h"  // DescribeDirRemoval, for the log
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

class DirRemovals {
 public:
  explicit DirRemovals(absl::Duration resend_after) : resend_after_(resend_after) {}

  void Add(const PendingDirRemoval& removal);
  bool empty() const { return pending() == 0; }
  int pending() const { return count_.load(std::memory_order_acquire); }
  // The removals assigned to `worker_id` (a heartbeat at `now`), none sent within
  // resend_after; each returned one counts as sent now. One hash lookup when none is: what a
  // heartbeat pays while removals for other workers wait.
  std::vector<JobDirRemoval> ForWorker(const std::string& worker_id, absl::Time now);
  // The scheduler pass's share, at most once per resend_after while removals wait: a removal
  // whose assigned worker `is_live` says is gone goes to `live_on_host(its host)` when that
  // names one ("" : it waits). The callbacks (the registry) run without mu_ held.
  void Reassign(absl::Time now, absl::FunctionRef<bool(const std::string&)> is_live,
                absl::FunctionRef<std::string(const std::string&)> live_on_host);
  // A worker's answer: the removal it ends (nullopt when there is none: already answered, or
  // never asked). Calls its waiters (OnAnswer).
  std::optional<PendingDirRemoval> Answer(const JobDirRemoved& answer);
  // The pending removals of directories on `host` (PendingDirRemoval.host).
  std::vector<PendingDirRemoval> OnHost(const std::string& host);
  // Calls `done` with the answer for `job_id` when it comes (at once when it is among the last
  // 64 answered), or with nullopt from the first ExpireWaiters at or after `deadline` (at once
  // when that has passed): from the thread of the answer's heartbeat or of ExpireWaiters, with
  // no lock held.
  using Waiter = std::function<void(std::optional<JobDirRemoved>)>;
  void OnAnswer(const std::string& job_id, absl::Time deadline, Waiter done);
  void ExpireWaiters(absl::Time now);
  // The worker `job_id`'s removal is assigned to, for a pending answer.
  std::string AskedOf(const std::string& job_id);

 private:
  struct Entry {
    PendingDirRemoval removal;
    std::string assigned;  // first removal.worker_id (rank 0's), then as Reassign decides
    absl::Time sent_at = absl::InfinitePast();
  };
  void AssignLocked(Entry& entry, const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(std::map<std::string, Entry>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const absl::Duration resend_after_;
  std::atomic<int> count_{0};
  absl::Mutex mu_;
  std::map<std::string, Entry> pending_ ABSL_GUARDED_BY(mu_);  // by job id
  // Job ids by assigned worker.
  absl::flat_hash_map<std::string, std::set<std::string>> by_worker_ ABSL_GUARDED_BY(mu_);
  absl::Time reassigned_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::deque<JobDirRemoved> answered_ ABSL_GUARDED_BY(mu_);  // newest last
  std::multimap<std::string, std::pair<absl::Time, Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_DIR_REMOVALS_H_
