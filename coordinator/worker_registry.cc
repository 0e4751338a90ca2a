#include "coordinator/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/rank_assignment.h"

namespace dtrain::coordinator {
namespace {

constexpr size_t kMaxIdLength = 256;

void AddCancel(HeartbeatResponse* response, const std::string& job_id) {
  for (const std::string& id : response->cancel_job_ids()) {
    if (id == job_id) return;
  }
  response->add_cancel_job_ids(job_id);
}

}  // namespace

JobAssignment Delivery::ToProto() const { return AssignmentForRank(*job, rank_index); }

void WorkerRegistry::SetJob(Record& r, const std::string& job_id) {
  r.info.set_job_id(job_id);
  r.info.set_state(job_id.empty() ? IDLE : BUSY);
  r.acked = false;
  r.cancel_requested = false;
  r.finishing_since.reset();
  r.pending.reset();
  r.held = false;
  r.delivered_at = absl::InfinitePast();
  r.dropped_since.reset();
  r.withheld_since.reset();
  r.reserved = 0;
}

int64_t MemoryShare(int64_t offered, const HostShare& host, bool idle) {
  if (host.host_bytes <= 0 || host.live <= 0) return offered;
  int64_t share = host.host_bytes / host.live;
  if (idle && host.idle > 0) {
    share = std::min(share, std::max<int64_t>(0, host.host_bytes - host.reserved) / host.idle);
  }
  return offered > 0 ? std::min(offered, share) : share;
}

namespace {

bool SharesHostMemory(const WorkerInfo& info) {
  return info.device().kind() == "cpu" && !info.host_id().empty() && info.host_memory_bytes() > 0;
}

}  // namespace

absl::flat_hash_map<std::string, HostShare> WorkerRegistry::HostSharesLocked() const {
  absl::flat_hash_map<std::string, HostShare> hosts;
  for (const auto& [id, r] : workers_) {
    if (r.lost || !SharesHostMemory(r.info)) continue;
    HostShare& host = hosts[r.info.host_id()];
    host.host_bytes = std::max(host.host_bytes, r.info.host_memory_bytes());
    ++host.live;
    if (r.info.job_id().empty()) {
      ++host.idle;
    } else {
      host.reserved += r.reserved;
    }
  }
  return hosts;
}

int64_t WorkerRegistry::MemoryOf(const Record& r,
                                 const absl::flat_hash_map<std::string, HostShare>& hosts) {
  if (r.lost || !SharesHostMemory(r.info)) return r.info.device().memory_bytes();
  return MemoryShare(r.info.offered_memory_bytes(), hosts.at(r.info.host_id()),
                     r.info.job_id().empty());
}

WorkerInfo WorkerRegistry::WithShare(const Record& r,
                                     const absl::flat_hash_map<std::string, HostShare>& hosts) {
  WorkerInfo info = r.info;
  info.mutable_device()->set_memory_bytes(MemoryOf(r, hosts));
  return info;
}

void WorkerRegistry::SetPacing(HeartbeatPace base, double max_rate) {
  absl::MutexLock lock(&mu_);
  base_ = base;
  max_rate_ = max_rate;
  int64_t live = 0;
  for (const auto& [id, r] : workers_) live += r.lost ? 0 : 1;
  pace_ = PaceFor(base_, live, max_rate_);
}

HeartbeatPace WorkerRegistry::pace() const {
  absl::MutexLock lock(&mu_);
  return pace_;
}

void WorkerRegistry::NoticePauseLocked(absl::Time now) {
  const std::optional<absl::Duration> gap = pauses_.Observe();
  if (!gap.has_value()) return;
  paused_ = paused_.value_or(absl::ZeroDuration()) + *gap;
  for (auto& [id, r] : workers_) {
    if (r.lost) continue;
    // Their heartbeats, reports and acknowledgements of the pause went unheard: the clocks
    // that judge them start again now.
    r.deadline = std::max(r.deadline, now + r.lease);
    if (r.dropped_since.has_value()) r.dropped_since = now;
    if (r.withheld_since.has_value()) r.withheld_since = now;
    if (!r.acked && r.delivered_at != absl::InfinitePast()) r.delivered_at = now;
    WatchLocked(r);
  }
}

void WorkerRegistry::WatchLocked(const Record& r) {
  absl::Time at = r.deadline;
  // Sweep's two waits, under Sweep's own conditions.
  if (!r.info.job_id().empty() && !r.cancel_requested && !r.finishing_since.has_value()) {
    if (r.acked && r.dropped_since.has_value()) at = std::min(at, *r.dropped_since + r.lease);
    if (!r.acked && !r.pending.has_value()) at = std::min(at, r.delivered_at + r.lease);
    if (r.pending.has_value() && r.withheld_since.has_value()) {
      at = std::min(at, *r.withheld_since + r.lease);
    }
  }
  next_check_ = std::min(next_check_, at);
}

std::optional<absl::Duration> WorkerRegistry::TakePause() {
  absl::MutexLock lock(&mu_);
  return std::exchange(paused_, std::nullopt);
}

void WorkerRegistry::DrainOfNewSessionLocked(const RegisterWorkerRequest& request, Record& r,
                                             RegisterResult& result) {
  // A new process is back from maintenance; the same session after a coordinator restart is
  // still drained.
  result.drain_ended = r.draining;
  r.draining = false;
  if (auto d = restored_drains_.find(request.worker_id()); d != restored_drains_.end()) {
    r.draining = d->second == request.session_id();
    result.drain_restored = r.draining;
    result.drain_ended = !r.draining;
    restored_drains_.erase(d);
  }
  r.info.set_draining(r.draining);
}

absl::StatusOr<WorkerRegistry::RegisterResult> WorkerRegistry::Register(
    const RegisterWorkerRequest& request, absl::Time now, const std::string& attach_job,
    const Delivery* assign) {
  if (request.worker_id().empty() || request.session_id().empty()) {
    return absl::InvalidArgumentError("worker_id and session_id must not be empty");
  }
  if (request.worker_id().size() > kMaxIdLength || request.session_id().size() > kMaxIdLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_id and session_id must be at most ", kMaxIdLength, " bytes"));
  }
  absl::MutexLock lock(&mu_);
  NoticePauseLocked(now);
  RegisterResult result;
  auto it = workers_.find(request.worker_id());
  const bool live = it != workers_.end() && !it->second.lost && now <= it->second.deadline;
  // The new process proved the holder dead (session_lock.h): it takes the id over at once.
  const bool superseded = live && !request.previous_session_id().empty() &&
                          it->second.session_id == request.previous_session_id();
  if (live && it->second.session_id != request.session_id() && !superseded) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "worker id \"%s\" is held by another live session (last heartbeat %.1fs ago, lease "
        "%.1fs); is a second worker running with this --worker_id?",
        request.worker_id(),
        absl::ToDoubleSeconds(now - absl::FromUnixMillis(it->second.info.last_heartbeat_unix_ms())),
        absl::ToDoubleSeconds(it->second.lease)));
  }
  const bool counted = it != workers_.end() && !it->second.lost;  // in live_
  if (it == workers_.end()) {
    it = workers_.emplace(request.worker_id(), Record{}).first;
  }
  Record& r = it->second;
  if (!counted) ++live_;
  result.new_session = !live || r.session_id != request.session_id();
  if (result.new_session) {
    if (!r.lost && !r.info.job_id().empty()) {
      // Expired but not swept yet, or superseded: the old session's rank is gone.
      result.replaced = WorkerFault{WorkerFault::kLost, request.worker_id(), r.info.job_id(),
                                    now - absl::FromUnixMillis(r.info.last_heartbeat_unix_ms())};
    }
    SetJob(r, "");
    r.finished_job.clear();
    DrainOfNewSessionLocked(request, r, result);
    r.session_id = request.session_id();
    r.info.set_registered_unix_ms(absl::ToUnixMillis(now));
  }
  r.lost = false;
  r.lease = pace_.lease;
  r.deadline = now + r.lease;
  r.running_job = request.running_job_id();
  r.running_step = request.running_step();
  r.info.set_worker_id(request.worker_id());
  r.info.set_address(request.address());
  r.info.set_host_label(request.host_label());
  *r.info.mutable_allowed_roots() = request.allowed_roots();
  *r.info.mutable_device() = request.device();
  r.info.set_offered_memory_bytes(request.device().memory_bytes());
  r.info.set_host_id(request.host_id());
  r.info.set_host_memory_bytes(request.host_memory_bytes());
  r.info.set_last_heartbeat_unix_ms(absl::ToUnixMillis(now));
  if (!attach_job.empty() && (r.info.job_id().empty() || r.info.job_id() == attach_job)) {
    SetJob(r, attach_job);
    r.acked = true;
  } else if (assign != nullptr && r.info.job_id().empty()) {
    SetJob(r, assign->job_id());
    r.pending = *assign;
  }
  if (r.info.job_id().empty()) r.info.set_state(IDLE);
  r.registered = std::make_shared<const WorkerInfo>(r.info);
  WatchLocked(r);
  r.host =
      host_numbers_.try_emplace(request.host_label(), static_cast<uint32_t>(host_numbers_.size()))
          .first->second;
  return result;
}

absl::StatusOr<WorkerRegistry::HeartbeatResult> WorkerRegistry::Heartbeat(
    const HeartbeatRequest& request, absl::Time now) {
  if (request.worker_id().empty()) return absl::InvalidArgumentError("worker_id is empty");
  HeartbeatResult result;
  std::optional<Delivery> delivery;
  {
    absl::MutexLock lock(&mu_);
    HeartbeatLocked(request, now, &result, &delivery);
  }
  // The rank's part of its job (O(its peers)) is built outside the lock.
  if (delivery.has_value()) *result.response.mutable_assignment() = delivery->ToProto();
  return result;
}

void WorkerRegistry::HeartbeatLocked(const HeartbeatRequest& request, absl::Time now,
                                     HeartbeatResult* result, std::optional<Delivery>* delivery) {
  NoticePauseLocked(now);
  HeartbeatResponse& response = result->response;
  auto it = workers_.find(request.worker_id());
  if (it == workers_.end() || it->second.lost || it->second.session_id != request.session_id() ||
      now > it->second.deadline) {
    // Unknown session, or its lease ran out (Sweep will mark it lost): register again.
    response.set_register_again(true);
    return;
  }
  Record& r = it->second;
  r.lease = pace_.lease;
  r.deadline = now + r.lease;
  WatchLocked(r);  // again below if it starts a wait
  if (max_rate_ > 0) response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(pace_.interval));
  r.info.set_last_heartbeat_unix_ms(absl::ToUnixMillis(now));
  r.running_job = request.running_job_id();
  r.running_step = request.running_step();

  const std::string& running = request.running_job_id();
  const std::string assigned = r.info.job_id();
  if (!running.empty() && running != assigned && running != r.finished_job) {
    AddCancel(&response, running);  // a job this worker should not be running
  }
  if (assigned.empty()) return;
  if (r.finishing_since.has_value()) {
    if (running != assigned) {
      SetJob(r, "");  // it left the job (and its peer service): idle again
      result->released = true;
    } else if (now - *r.finishing_since > r.lease) {
      AddCancel(&response, assigned);  // stuck delivering the job's last reports
    }
    return;
  }
  if (r.cancel_requested) {
    if (running != assigned) {
      SetJob(r, "");  // it stopped: idle again
      result->released = true;
    } else {
      AddCancel(&response, assigned);
    }
  } else if (running == assigned && r.pending.has_value()) {
    // It runs an earlier run of this job (a recovery placed the job here again before that run
    // ended, or it came back after a coordinator restart still running it): stop that run; the
    // new assignment goes out once the worker reports it gone.
    AddCancel(&response, assigned);
  } else if (running == assigned) {
    r.dropped_since.reset();
    if (!r.acked) {
      r.acked = true;
      result->acked_job = assigned;
    }
  } else if (r.acked) {
    if (!r.dropped_since.has_value()) r.dropped_since = now;
  } else if (r.pending.has_value() && !r.held) {
    if (running.empty()) {
      *delivery = std::move(r.pending);
      r.pending.reset();
      r.withheld_since.reset();
      r.delivered_at = now;
    } else if (!r.withheld_since.has_value()) {
      // Only to a worker that runs nothing: one still in another job (told above to stop it: a
      // run it kept while paused past its lease, or a finished job's last reports) would refuse
      // this one. It goes out once the worker reports that job gone, within a lease (Sweep).
      r.withheld_since = now;
    }
  }
  WatchLocked(r);
}

absl::StatusOr<bool> WorkerRegistry::Report(const std::string& worker_id,
                                            const std::string& session_id,
                                            const std::string& job_id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  NoticePauseLocked(now);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.lost || it->second.session_id != session_id ||
      now > it->second.deadline) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id, " session ", session_id,
                                                      " is not registered; register again"));
  }
  Record& r = it->second;
  if (r.info.job_id() != job_id || r.cancel_requested || r.finishing_since.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " is no longer assigned to worker ", worker_id));
  }
  if (r.pending.has_value()) {
    // Not delivered yet, so not from this assignment: from an earlier run of the job.
    return absl::FailedPreconditionError(absl::StrCat("a report of an earlier run of ", job_id,
                                                      " on worker ", worker_id,
                                                      " (the job was placed on it again)"));
  }
  r.deadline = now + r.lease;
  WatchLocked(r);
  r.dropped_since.reset();
  if (r.acked) return false;
  r.acked = true;
  return true;
}

bool WorkerRegistry::ReportRecorded(const std::string& worker_id, const std::string& session_id,
                                    uint64_t seq) const {
  absl::MutexLock lock(&mu_);
  auto it = recorded_reports_.find(worker_id);
  return seq != 0 && it != recorded_reports_.end() && it->second.first == session_id &&
         seq <= it->second.second;
}

void WorkerRegistry::NoteReportRecorded(const std::string& worker_id, const std::string& session_id,
                                        uint64_t seq) {
  if (seq == 0) return;
  absl::MutexLock lock(&mu_);
  auto& [session, highest] = recorded_reports_[worker_id];
  if (session != session_id) {  // a new process of the worker: its numbers start again
    session = session_id;
    highest = 0;
  }
  highest = std::max(highest, seq);
}

absl::Status WorkerRegistry::Assign(std::shared_ptr<const JobAssignment> job, absl::Time now) {
  const Placement& placement = job->placement();
  absl::MutexLock lock(&mu_);
  for (const RankAssignment& rank : placement.ranks()) {
    const std::string& worker_id = rank.worker_id();
    auto it = workers_.find(worker_id);
    if (it == workers_.end() || it->second.lost || now > it->second.deadline ||
        !it->second.info.job_id().empty() || it->second.draining) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", worker_id, " is no longer live and idle"));
    }
  }
  for (int i = 0; i < placement.ranks_size(); ++i) {
    Record& r = workers_.at(placement.ranks(i).worker_id());
    SetJob(r, job->job_id());
    r.pending = Delivery{job, i};
    r.held = true;
    r.reserved = placement.ranks(i).memory_bytes();
  }
  return absl::OkStatus();
}

void WorkerRegistry::Publish(const JobAssignment& job) {
  absl::MutexLock lock(&mu_);
  for (const RankAssignment& rank : job.placement().ranks()) {
    auto it = workers_.find(rank.worker_id());
    if (it == workers_.end() || it->second.info.job_id() != job.job_id()) continue;
    it->second.held = false;
  }
}

void WorkerRegistry::CancelJob(const std::string& job_id, absl::Span<const std::string> workers) {
  absl::MutexLock lock(&mu_);
  for (const std::string& worker_id : workers) {
    auto it = workers_.find(worker_id);
    if (it == workers_.end() || it->second.info.job_id() != job_id) continue;
    Record& r = it->second;
    if (r.pending.has_value()) {
      SetJob(r, "");  // never delivered: nothing to stop
    } else {
      r.cancel_requested = true;
    }
  }
}

void WorkerRegistry::Release(const std::string& worker_id, const std::string& job_id,
                             absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.info.job_id() != job_id) return;
  Record& r = it->second;
  if (!r.finishing_since.has_value()) r.finishing_since = now;
  r.finished_job = job_id;
}

absl::StatusOr<std::string> WorkerRegistry::Deregister(const std::string& worker_id,
                                                       const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.lost || it->second.session_id != session_id) {
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id, " has no live session ", session_id));
  }
  std::string job = it->second.info.job_id();
  workers_.erase(it);
  --live_;
  return job;
}

absl::Status WorkerRegistry::Forget(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("no worker ", worker_id));
  if (!it->second.lost) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", worker_id, " is ", WorkerState_Name(it->second.info.state()),
        ", not LOST: only lost workers can be forgotten (stop a live worker with SIGTERM: it "
        "deregisters itself)"));
  }
  workers_.erase(it);
  recorded_reports_.erase(worker_id);
  return absl::OkStatus();
}

std::vector<WorkerFault> WorkerRegistry::Sweep(absl::Time now) {
  std::vector<WorkerFault> faults;
  absl::MutexLock lock(&mu_);
  NoticePauseLocked(now);
  if (now <= next_check_) {
    // No lease and no wait for a worker ends before next_check_: nothing to find.
    pace_ = PaceFor(base_, live_, max_rate_);
    return faults;
  }
  int64_t live = 0;
  next_check_ = absl::InfiniteFuture();
  for (auto& [id, r] : workers_) {
    if (r.lost) continue;
    ++live;
    if (now > r.deadline) {
      // A worker lost after its outcome arrived owes the job nothing.
      faults.push_back(WorkerFault{WorkerFault::kLost, id,
                                   r.finishing_since.has_value() ? "" : r.info.job_id(),
                                   now - absl::FromUnixMillis(r.info.last_heartbeat_unix_ms())});
      SetJob(r, "");
      r.lost = true;
      r.info.set_state(LOST);
      --live;
      continue;
    }
    if (!r.info.job_id().empty() && !r.cancel_requested && !r.finishing_since.has_value()) {
      if (r.acked && r.dropped_since.has_value() && now - *r.dropped_since > r.lease) {
        faults.push_back(WorkerFault{WorkerFault::kDropped, id, r.info.job_id(), {}});
        SetJob(r, "");
      } else if ((!r.acked && !r.pending.has_value() && now - r.delivered_at > r.lease) ||
                 (r.pending.has_value() && r.withheld_since.has_value() &&
                  now - *r.withheld_since > r.lease)) {
        faults.push_back(WorkerFault{WorkerFault::kNotAccepted, id, r.info.job_id(), {}});
        r.cancel_requested = true;  // in case it starts late
      }
    }
    WatchLocked(r);
  }
  live_ = live;
  pace_ = PaceFor(base_, live, max_rate_);
  std::sort(faults.begin(), faults.end(),
            [](const WorkerFault& a, const WorkerFault& b) { return a.worker_id < b.worker_id; });
  return faults;
}

int64_t WorkerRegistry::CountWithRoom(int64_t bytes,
                                      absl::FunctionRef<bool(const WorkerInfo&)> accept) const {
  absl::MutexLock lock(&mu_);
  const absl::flat_hash_map<std::string, HostShare> hosts = HostSharesLocked();
  int64_t count = 0;
  for (const auto& [id, r] : workers_) {
    if (r.lost || !accept(r.info)) continue;
    const int64_t room =
        SharesHostMemory(r.info)
            ? MemoryShare(r.info.offered_memory_bytes(), hosts.at(r.info.host_id()), /*idle=*/false)
            : r.info.device().memory_bytes();
    if (room == 0 || room >= bytes) ++count;
  }
  return count;
}

WorkerRegistry::LiveRoots WorkerRegistry::RootsOfLive(
    absl::FunctionRef<bool(const WorkerInfo&)> accept) const {
  LiveRoots live;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, r] : workers_) {
      if (r.lost || !accept(r.info)) continue;
      ++live.count;
      if (r.info.allowed_roots().empty()) continue;
      live.roots.emplace_back(id, std::vector<std::string>(r.info.allowed_roots().begin(),
                                                           r.info.allowed_roots().end()));
    }
  }
  std::sort(live.roots.begin(), live.roots.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return live;
}

std::vector<WorkerInfo> WorkerRegistry::IdleWorkers() const {
  std::vector<WorkerInfo> idle;
  absl::MutexLock lock(&mu_);
  const absl::flat_hash_map<std::string, HostShare> hosts = HostSharesLocked();
  // Sorted as pointers, then copied once in order: sorting 50,000 WorkerInfo messages by value
  // cost as much as copying them.
  std::vector<const std::pair<const std::string, Record>*> order;
  for (const auto& entry : workers_) {
    const Record& r = entry.second;
    if (!r.lost && !r.draining && r.info.job_id().empty()) order.push_back(&entry);
  }
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  idle.reserve(order.size());
  for (const auto* entry : order) idle.push_back(WithShare(entry->second, hosts));
  return idle;
}

std::vector<plan::Candidate> WorkerRegistry::IdleCandidates() const {
  std::vector<plan::Candidate> idle;
  absl::MutexLock lock(&mu_);
  idle.reserve(workers_.size());
  bool shares = false;  // some idle worker's memory is its share of its host's
  for (const auto& [id, r] : workers_) {
    if (r.lost || r.draining || !r.info.job_id().empty()) continue;
    idle.push_back(plan::Candidate{r.registered, r.info.device().memory_bytes(), r.host});
    shares = shares || SharesHostMemory(r.info);
  }
  if (!shares) return idle;
  // Rare at this size (CPU workers that said which host they share): a second pass.
  const absl::flat_hash_map<std::string, HostShare> hosts = HostSharesLocked();
  for (plan::Candidate& c : idle) {
    c.memory_bytes = MemoryOf(workers_.at(c.worker->worker_id()), hosts);
  }
  return idle;
}

WorkerCounts WorkerRegistry::Counts() const {
  WorkerCounts counts;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, r] : workers_) {
    if (r.lost) {
      ++counts.lost;
    } else if (r.draining && r.info.job_id().empty()) {
      continue;  // drained: neither idle nor busy
    } else if (r.info.job_id().empty()) {
      ++counts.idle;
    } else {
      ++counts.busy;
    }
  }
  return counts;
}

std::vector<WorkerInfo> WorkerRegistry::List() const {
  // Under the mutex only what changed since each registration (a few words a worker); the
  // WorkerInfo messages (50,000 copies at full scale: a second of heartbeats held up when
  // they were made under it) are built after.
  struct Current {
    std::shared_ptr<const WorkerInfo> registered;
    WorkerState state;
    std::string job_id;
    int64_t last_heartbeat_unix_ms;
    bool draining;
    int64_t memory_bytes;
  };
  std::vector<Current> current;
  {
    absl::MutexLock lock(&mu_);
    const absl::flat_hash_map<std::string, HostShare> hosts = HostSharesLocked();
    current.reserve(workers_.size());
    for (const auto& [id, r] : workers_) {
      current.push_back(Current{r.registered, ListedState(r), r.info.job_id(),
                                r.info.last_heartbeat_unix_ms(), r.info.draining(),
                                MemoryOf(r, hosts)});
    }
  }
  std::sort(current.begin(), current.end(), [](const Current& a, const Current& b) {
    return a.registered->worker_id() < b.registered->worker_id();
  });
  std::vector<WorkerInfo> all;
  all.reserve(current.size());
  for (const Current& c : current) {
    WorkerInfo& info = all.emplace_back(*c.registered);
    info.set_state(c.state);
    info.set_job_id(c.job_id);
    info.set_last_heartbeat_unix_ms(c.last_heartbeat_unix_ms);
    info.set_draining(c.draining);
    info.mutable_device()->set_memory_bytes(c.memory_bytes);
  }
  return all;
}

std::string WorkerRegistry::JobOf(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.lost) return "";
  return it->second.info.job_id();
}

bool WorkerRegistry::IsLive(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  return it != workers_.end() && !it->second.lost;
}

std::string WorkerRegistry::LiveWorkerOnHost(const std::string& host_label) const {
  absl::MutexLock lock(&mu_);
  std::string found;
  for (const auto& [id, r] : workers_) {
    if (!r.lost && r.info.host_label() == host_label && (found.empty() || id < found)) found = id;
  }
  return found;
}

bool WorkerRegistry::AnyWorkerOnHost(const std::string& host_label) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, r] : workers_) {
    if (r.info.host_label() == host_label) return true;
  }
  return false;
}

WorkerState WorkerRegistry::ListedState(const Record& r) {
  return r.draining && !r.lost && r.info.job_id().empty() ? DRAINED : r.info.state();
}

WorkerInfo WorkerRegistry::Listed(const Record& r, WorkerInfo info) {
  info.set_state(ListedState(r));
  return info;
}

absl::StatusOr<std::string> WorkerRegistry::SetDraining(const std::string& worker_id,
                                                        bool draining) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("no worker ", worker_id));
  Record& r = it->second;
  if (r.lost) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " is LOST: there is nothing to drain"));
  }
  r.draining = draining;
  r.info.set_draining(draining);
  return r.cancel_requested ? std::string() : r.info.job_id();
}

absl::StatusOr<std::string> WorkerRegistry::DrainableSession(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("no worker ", worker_id));
  if (it->second.lost) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " is LOST: there is nothing to drain"));
  }
  return it->second.session_id;
}

void WorkerRegistry::RestoreDrains(
    absl::flat_hash_map<std::string, std::string> session_by_worker) {
  absl::MutexLock lock(&mu_);
  restored_drains_ = std::move(session_by_worker);
}

absl::StatusOr<WorkerInfo> WorkerRegistry::Get(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("no worker ", worker_id));
  return Listed(it->second, it->second.info);
}

int64_t WorkerRegistry::RunningStep(const std::string& worker_id, const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.running_job != job_id) return -1;
  return it->second.running_step;
}

}  // namespace dtrain::coordinator
