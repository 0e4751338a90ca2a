#include "coordinator/sample_asks.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dtrain::coordinator {

absl::Status SampleAsks::Ask(const std::string& worker_id, SampleAsk ask, absl::Time deadline,
                             Done done) {
  absl::MutexLock lock(&mu_);
  int of_worker = 0;
  for (const auto& [id, open] : asks_) of_worker += open.worker_id == worker_id ? 1 : 0;
  if (of_worker >= kMaxPerWorker) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker ", worker_id, " is drawing ", of_worker,
                     " samples already; ask again when one is done"));
  }
  const std::string id = absl::StrCat("sample-", next_id_++);
  ask.set_ask_id(id);
  asks_[id] = Open{worker_id, std::move(ask), deadline, false, std::move(done)};
  open_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

std::vector<SampleAsk> SampleAsks::ForWorker(const std::string& worker_id) {
  std::vector<SampleAsk> out;
  absl::MutexLock lock(&mu_);
  for (auto& [id, open] : asks_) {
    if (open.worker_id != worker_id || open.sent) continue;
    open.sent = true;
    out.push_back(open.ask);
  }
  return out;
}

void SampleAsks::EndIf(const std::function<bool(const Open&)>& pick,
                       const std::function<absl::StatusOr<SampleDrawn>(const Open&)>& result) {
  std::vector<std::pair<Done, absl::StatusOr<SampleDrawn>>> ended;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = asks_.begin(); it != asks_.end();) {
      if (!pick(it->second)) {
        ++it;
        continue;
      }
      ended.emplace_back(std::move(it->second.done), result(it->second));
      it = asks_.erase(it);
      open_.fetch_sub(1, std::memory_order_release);
    }
  }
  for (auto& [done, r] : ended) done(std::move(r));
}

bool SampleAsks::Answer(const std::string& worker_id, const SampleDrawn& drawn) {
  bool found = false;
  EndIf(
      [&](const Open& open) {
        const bool asked = open.ask.ask_id() == drawn.ask_id() && open.worker_id == worker_id;
        found = found || asked;
        return asked;
      },
      [&](const Open&) { return drawn; });
  return found;
}

void SampleAsks::Expire(absl::Time now, absl::FunctionRef<bool(const std::string&)> is_live) {
  if (empty()) return;
  std::set<std::string> workers;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, open] : asks_) workers.insert(open.worker_id);
  }
  std::set<std::string> gone;
  for (const std::string& w : workers) {
    if (!is_live(w)) gone.insert(w);
  }
  EndIf([&](const Open& open) { return open.deadline <= now || gone.count(open.worker_id) > 0; },
        [&](const Open& open) -> absl::StatusOr<SampleDrawn> {
          if (gone.count(open.worker_id) > 0) {
            return absl::UnavailableError(absl::StrCat("worker ", open.worker_id,
                                                       " was lost before it drew the sample of ",
                                                       open.ask.job_id()));
          }
          return absl::DeadlineExceededError(absl::StrCat(
              "worker ", open.worker_id, " did not answer with the sample of ", open.ask.job_id(),
              " in time", open.sent ? "" : " (it did not heartbeat)"));
        });
}

void SampleAsks::EndSent(const std::string& worker_id) {
  if (empty()) return;
  EndIf([&](const Open& open) { return open.sent && open.worker_id == worker_id; },
        [&](const Open& open) -> absl::StatusOr<SampleDrawn> {
          return absl::UnavailableError(absl::StrCat("worker ", worker_id,
                                                     " restarted before it drew the sample of ",
                                                     open.ask.job_id(), "; ask again"));
        });
}

void SampleAsks::EndAll(const std::string& why) {
  EndIf([](const Open&) { return true; },
        [&](const Open&) -> absl::StatusOr<SampleDrawn> { return absl::UnavailableError(why); });
}

}  // namespace dtrain::coordinator
