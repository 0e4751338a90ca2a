#include "coordinator/dir_removals.h"

#include <utility>

#include "absl/time/clock.h"

namespace dtrain::coordinator {
namespace {
constexpr size_t kAnswersKept = 64;

}  // namespace

void DirRemovals::Add(const PendingDirRemoval& removal) {
  absl::MutexLock lock(&mu_);
  pending_[removal.job_id] = Entry{removal};
  count_.store(static_cast<int>(pending_.size()), std::memory_order_release);
}

std::vector<JobDirRemoval> DirRemovals::ForWorker(
    absl::string_view worker_id, absl::string_view host,
    absl::FunctionRef<bool(const std::string&)> is_live, absl::Time now) {
  // (job id, the worker it names) of the removals this worker may get; is_live asks the
  // registry, so it is called without mu_ held, and what is taken is checked again under it.
  std::vector<std::pair<std::string, std::string>> candidates;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, entry] : pending_) {
      if (now - entry.sent_at < resend_after_) continue;
      const PendingDirRemoval& r = entry.removal;
      if (r.worker_id == worker_id || (!host.empty() && r.host == host)) {
        candidates.emplace_back(id, r.worker_id);
      }
    }
  }
  std::vector<std::string> take;
  for (const auto& [id, named] : candidates) {
    if (named == worker_id || named.empty() || !is_live(named)) take.push_back(id);
  }
  std::vector<JobDirRemoval> out;
  absl::MutexLock lock(&mu_);
  for (const std::string& id : take) {
    auto it = pending_.find(id);
    if (it == pending_.end() || now - it->second.sent_at < resend_after_) continue;
    it->second.sent_to = std::string(worker_id);
    it->second.sent_at = now;
    JobDirRemoval& r = out.emplace_back();
    r.set_job_id(it->second.removal.job_id);
    r.set_job_uid(it->second.removal.uid);
    r.set_dir(it->second.removal.dir);
    r.set_spec_checkpoint_dir(it->second.removal.spec_dir);
  }
  return out;
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
    removal = std::move(it->second.removal);
    pending_.erase(it);
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
  if (it == pending_.end()) return "";
  return it->second.sent_to.empty() ? it->second.removal.worker_id : it->second.sent_to;
}

}  // namespace dtrain::coordinator
