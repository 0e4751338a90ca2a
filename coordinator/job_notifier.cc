#include "coordinator/job_notifier.h"

#include <utility>

namespace dtrain::coordinator {

uint64_t JobNotifier::Version(absl::string_view job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? 0 : it->second.version;
}

void JobNotifier::Notify(absl::string_view job_id) {
  std::vector<Waiter> ready;
  {
    absl::MutexLock lock(&mu_);
    PerJob& job = jobs_[job_id];
    // Versions come from one counter, so a job forgotten and seen again never repeats one.
    job.version = ++last_version_;
    ready.swap(job.waiters);
    for (const Waiter& w : ready) token_job_.erase(w.token);
  }
  for (Waiter& w : ready) w.callback();
}

bool JobNotifier::WaitOnce(absl::string_view job_id, uint64_t seen_version,
                           std::function<void()> callback, Token* token) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return false;
  auto it = jobs_.find(job_id);
  const uint64_t version = it == jobs_.end() ? 0 : it->second.version;
  if (version != seen_version) return false;
  if (it == jobs_.end()) it = jobs_.emplace(std::string(job_id), PerJob{}).first;
  *token = next_token_++;
  it->second.waiters.push_back(Waiter{*token, std::move(callback)});
  token_job_.emplace(*token, std::string(job_id));
  return true;
}

bool JobNotifier::Cancel(Token token) {
  absl::MutexLock lock(&mu_);
  auto t = token_job_.find(token);
  if (t == token_job_.end()) return false;
  auto it = jobs_.find(t->second);
  token_job_.erase(t);
  if (it == jobs_.end()) return false;
  std::vector<Waiter>& waiters = it->second.waiters;
  for (size_t i = 0; i < waiters.size(); ++i) {
    if (waiters[i].token == token) {
      waiters.erase(waiters.begin() + i);
      return true;
    }
  }
  return false;
}

void JobNotifier::Shutdown() {
  std::vector<Waiter> ready;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    for (auto& [id, job] : jobs_) {
      for (Waiter& w : job.waiters) ready.push_back(std::move(w));
      job.waiters.clear();
    }
    token_job_.clear();
  }
  for (Waiter& w : ready) w.callback();
}

bool JobNotifier::is_shut_down() const {
  absl::MutexLock lock(&mu_);
  return shut_down_;
}

void JobNotifier::Forget(absl::string_view job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end() && it->second.waiters.empty()) jobs_.erase(it);
}

}  // namespace dtrain::coordinator
