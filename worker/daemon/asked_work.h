// AskedWork: work the coordinator asks a worker for in its heartbeat answers (the directories of
// deleted jobs to remove, samples of a job's model to draw), done one at a time on a thread of
// its own, started at the first ask, so that neither a heartbeat nor a training step waits for
// it; the answers go back in the following heartbeats.
//
// Each ask is done once: asked again while queued, running or its answer undelivered (the
// coordinator repeats an ask until it hears back), it is not queued again; asked again after its
// answer was delivered, it is done again. Answers wait in Answers() until a heartbeat carrying
// them gets through (Delivered). `answered` is called, no lock held, whenever one is ready (the
// worker heartbeats then rather than at its interval). Stop() drops the asks not started; the one
// running sees `stopping()` turn true and may give up; the destructor waits for it.
//
//   AskedWork<SampleAsk, SampleDrawn> work(
//       [](const SampleAsk& a) { return a.ask_id(); },
//       [](const SampleAsk& a, const std::function<bool()>& stopping) { return Draw(a); },
//       [] { HeartbeatSoon(); });
//   work.Queue(ask);                                         // from a heartbeat's answer
//   for (const SampleDrawn& d : work.Answers()) ...          // into the next heartbeat
//   work.Delivered(n);                                       // once it got through
#ifndef DTRAIN_WORKER_DAEMON_ASKED_WORK_H_
#define DTRAIN_WORKER_DAEMON_ASKED_WORK_H_

#include <algorithm>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dtrain::worker {

template <typename Ask, typename Answer>
class AskedWork {
 public:
  using KeyOf = std::function<std::string(const Ask&)>;
  using Run = std::function<Answer(const Ask&, const std::function<bool()>& stopping)>;

  AskedWork(KeyOf key_of, Run run, std::function<void()> answered)
      : key_of_(std::move(key_of)), run_(std::move(run)), answered_(std::move(answered)) {}
  AskedWork(const AskedWork&) = delete;
  AskedWork& operator=(const AskedWork&) = delete;
  ~AskedWork() {
    Stop();
    std::thread thread;
    {
      absl::MutexLock lock(&mu_);
      thread = std::move(thread_);
    }
    if (thread.joinable()) thread.join();
  }

  void Queue(const Ask& ask) {
    absl::MutexLock lock(&mu_);
    if (stopping_ || !open_.insert(key_of_(ask)).second) return;
    queued_.push_back(ask);
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  }

  // The answers not yet delivered, oldest first.
  std::vector<Answer> Answers() const {
    absl::MutexLock lock(&mu_);
    std::vector<Answer> out;
    for (const auto& [key, answer] : answers_) out.push_back(answer);
    return out;
  }

  // The first `n` of Answers() got through.
  void Delivered(size_t n) {
    absl::MutexLock lock(&mu_);
    n = std::min(n, answers_.size());
    for (size_t i = 0; i < n; ++i) open_.erase(answers_[i].first);
    answers_.erase(answers_.begin(), answers_.begin() + n);
  }

  void Stop() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queued_.clear();
  }

 private:
  void Loop() {
    const std::function<bool()> stopping = [this] {
      absl::MutexLock lock(&mu_);
      return stopping_;
    };
    while (true) {
      Ask ask;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || !queued_.empty();
        };
        mu_.Await(absl::Condition(&ready));
        if (stopping_) return;
        ask = std::move(queued_.front());
        queued_.pop_front();
      }
      Answer answer = run_(ask, stopping);
      {
        absl::MutexLock lock(&mu_);
        answers_.emplace_back(key_of_(ask), std::move(answer));
      }
      if (answered_ != nullptr) answered_();
    }
  }

  const KeyOf key_of_;
  const Run run_;
  const std::function<void()> answered_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Ask> queued_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> open_ ABSL_GUARDED_BY(mu_);  // keys queued, running or undelivered
  std::vector<std::pair<std::string, Answer>> answers_ ABSL_GUARDED_BY(mu_);
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_ASKED_WORK_H_
