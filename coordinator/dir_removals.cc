#include "coordinator/dir_removals.h"

#include <utility>

#include "absl/time/clock.h"

namespace dtrain::coordinator {
namespace {
constexpr size_t kAnswersKept = 64;

}  // namespace

void DirRemovals::Add(const PendingDirRemoval& removal) {
  absl::MutexLock lock(&mu_);
  if (auto old = pending_.find(removal.job_id); old != pending_.end()) EraseLocked(old);
  Entry& entry = pending_[removal.job_id];
  entry.removal = removal;
  AssignLocked(entry, removal.worker_id);
  count_.store(static_cast<int>(pending_.size()), std::memory_order_release);
}

void DirRemovals::AssignLocked(Entry& entry, const std::string& worker_id) {
  if (!entry.assigned.empty()) {
    auto it = by_worker_.find(entry.assigned);
    it->second.erase(entry.removal.job_id);
    if (it->second.empty()) by_worker_.erase(it);
  }
  entry.assigned = worker_id;
  entry.sent_at = absl::InfinitePast();
  if (!worker_id.empty()) by_worker_[worker_id].insert(entry.removal.job_id);
}

void DirRemovals::EraseLocked(std::map<std::string, Entry>::iterator it) {
  AssignLocked(it->second, "");
  pending_.erase(it);
}

std::vector<JobDirRemoval> DirRemovals::ForWorker(const std::string& worker_id, absl::Time now) {
  std::vector<JobDirRemoval> out;
  absl::MutexLock lock(&mu_);
  auto mine = by_worker_.find(worker_id);
  if (mine == by_worker_.end()) return out;
  for (const std::string& id : mine->second) {
    Entry& entry = pending_.at(id);
    if (now - entry.sent_at < resend_after_) continue;
    entry.sent_at = now;
    JobDirRemoval& r = out.emplace_back();
    r.set_job_id(entry.removal.job_id);
    r.set_job_uid(entry.removal.uid);
    r.set_dir(entry.removal.dir);
    r.set_spec_checkpoint_dir(entry.removal.spec_dir);
  }
  return out;
}

void DirRemovals::Reassign(absl::Time now, absl::FunctionRef<bool(const std::string&)> is_live,
                           absl::FunctionRef<std::string(const std::string&)> live_on_host) {
  struct Seen {
    std::string job_id, assigned, host;
  };
  std::vector<Seen> seen;
  {
    absl::MutexLock lock(&mu_);
    if (pending_.empty() || now - reassigned_ < resend_after_) return;
    reassigned_ = now;
    for (const auto& [id, entry] : pending_)
      seen.push_back({id, entry.assigned, entry.removal.host});
  }
  std::vector<std::pair<std::string, std::string>> moves;  // (job id, worker)
  for (const Seen& s : seen) {
    if (!s.assigned.empty() && is_live(s.assigned)) continue;
    if (s.host.empty()) continue;
    std::string other = live_on_host(s.host);
    if (!other.empty() && other != s.assigned) moves.emplace_back(s.job_id, std::move(other));
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [id, worker] : moves) {
    if (auto it = pending_.find(id); it != pending_.end()) AssignLocked(it->second, worker);
  }
}

std::optional<PendingDirRemoval> DirRemovals::Answer(const JobDirRemoved& answer) {
  std::vector<Waiter> wake;
  std::optional<PendingDirRemoval> removal;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(answer.job_id());
    // (A removal whose directory the coordinator never knew takes the one the worker resolved.)
    if (it == pending_.end() ||
        (!it->second.removal.dir.empty() && it->second.removal.dir != answer.dir())) {
      return std::nullopt;
    }
    removal = it->second.removal;
    EraseLocked(it);
    count_.store(static_cast<int>(pending_.size()), std::memory_order_release);
    answered_.push_back(answer);
    if (answered_.size() > kAnswersKept) answered_.pop_front();
    auto [first, last] = waiters_.equal_range(answer.job_id());
    for (auto w = first; w != last; ++w) wake.push_back(std::move(w->second.second));
    waiters_.erase(first, last);
  }
  for (Waiter& w : wake) w(answer);
  return removal;
}

std::vector<PendingDirRemoval> DirRemovals::OnHost(const std::string& host) {
  std::vector<PendingDirRemoval> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, entry] : pending_) {
    if (entry.removal.host == host) out.push_back(entry.removal);
  }
  return out;
}

void DirRemovals::OnAnswer(const std::string& job_id, absl::Time deadline, Waiter done) {
  std::optional<JobDirRemoved> known;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = answered_.rbegin(); it != answered_.rend(); ++it) {
      if (it->job_id() == job_id) {
        known = *it;
        break;
      }
    }
    if (!known.has_value() && absl::Now() < deadline) {
      waiters_.emplace(job_id, std::make_pair(deadline, std::move(done)));
      return;
    }
  }
  done(std::move(known));
}

void DirRemovals::ExpireWaiters(absl::Time now) {
  std::vector<Waiter> expired;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.first > now) {
        ++it;
        continue;
      }
      expired.push_back(std::move(it->second.second));
      it = waiters_.erase(it);
    }
  }
  for (Waiter& w : expired) w(std::nullopt);
}

std::string DirRemovals::AskedOf(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(job_id);
  return it == pending_.end() ? "" : it->second.assigned;
}

}  // namespace dtrain::coordinator
