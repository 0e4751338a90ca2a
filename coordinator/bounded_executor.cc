#include "coordinator/bounded_executor.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace dtrain::coordinator {

BoundedExecutor::BoundedExecutor(int threads, int max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

BoundedExecutor::~BoundedExecutor() { Stop(); }

absl::Status BoundedExecutor::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("coordinator shutting down");
  if (static_cast<int>(queue_.size()) >= max_queued_) {
    return absl::UnavailableError(
        absl::StrCat(queue_.size(), " requests of this kind are waiting already; retry later"));
  }
  queue_.push_back(std::move(task));
  return absl::OkStatus();
}

void BoundedExecutor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void BoundedExecutor::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](BoundedExecutor* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace dtrain::coordinator
