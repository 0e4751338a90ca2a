#include "worker/daemon/report_queue.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/utf8.h"

namespace dtrain::worker {

ReportQueue::ReportQueue(Options options, std::function<void(const std::string&)> log)
    : options_(options), log_(std::move(log)) {}

void ReportQueue::Log(const std::string& line) const {
  if (log_) log_(line);
}

namespace {

// Dropped for room only when nothing else can go: what the coordinator decides on (a seal, the
// job's location, a wait for disk space, a skipped checkpoint). Outcomes are never dropped.
bool IsDroppableLine(const ReportProgressRequest& r) { return r.has_event() || r.has_log(); }

}  // namespace

void ReportQueue::Push(ReportProgressRequest request) {
  if (!request.has_outcome() && size() >= std::max<int64_t>(1, options_.max_reports)) {
    MakeRoom();
  }
  // After MakeRoom: a step it kept as the newest is not the newest any more.
  if (request.has_step() && stride_ > 1) ReplaceUnkeptTail(request);
  // Text quoted from files and peers (a dataset path, a damaged manifest) in any field: a
  // string that is not UTF-8 makes the whole report unparseable at the coordinator.
  MakeStringsValidUtf8(&request);
  if (request.time_unix_ms() == 0) request.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  Pending r;
  r.seq = next_seq_++;
  r.request = std::move(request);
  reports_.push_back(std::move(r));
  if (!pending_warning_.first.empty() && !pushing_warning_) {
    const auto [job_id, text] = std::move(pending_warning_);
    pending_warning_ = {};
    pushing_warning_ = true;
    Warn(job_id, text);
    pushing_warning_ = false;
  }
}

// One run of one job: a StepRun holds no other, and a step replaces only its own run's.
bool ReportQueue::SameRun(const ReportProgressRequest& a, const ReportProgressRequest& b) {
  return a.job_id() == b.job_id() && a.has_attempt() == b.has_attempt() &&
         a.attempt() == b.attempt();
}

bool ReportQueue::Kept(const StepMetrics& step, int64_t stride) {
  return step.step() % stride == 0 || step.has_val_loss();
}

void ReportQueue::ReplaceUnkeptTail(const ReportProgressRequest& next) {
  // The newest step queued (events and lines after it are another stream: they stay in order).
  auto newest = std::find_if(reports_.rbegin(), reports_.rend(),
                             [](const Pending& r) { return r.request.has_step(); });
  if (newest == reports_.rend()) return;
  const ReportProgressRequest& tail = newest->request;
  if (SameRun(tail, next) && !Kept(tail.step(), stride_)) {
    reports_.erase(std::next(newest).base());
    ++dropped_;
  }
}

void ReportQueue::MakeRoom() {
  const std::string full = absl::StrCat("report buffer full (", options_.max_reports, "): ");
  if (const int64_t thinned = ThinSteps(); thinned > 0) {
    dropped_ += thinned;
    pending_warning_ = {
        reports_.back().request.job_id(),
        absl::StrCat(full, "the coordinator has not taken reports for a while; keeping every ",
                     stride_, stride_ == 2 ? "nd" : "th", " step waiting (", dropped_,
                     " reports dropped so far)")};
    return;
  }
  auto oldest = std::find_if(reports_.begin(), reports_.end(),
                             [](const Pending& r) { return IsDroppableLine(r.request); });
  if (oldest == reports_.end()) {
    oldest = std::find_if(reports_.begin(), reports_.end(),
                          [](const Pending& r) { return !r.request.has_outcome(); });
  }
  if (oldest == reports_.end()) return;
  const std::string job_id = oldest->request.job_id();
  reports_.erase(oldest);
  ++dropped_;
  if (single_drops_++ % 1000 == 0) {
    pending_warning_ = {job_id, absl::StrCat(full, "dropping the oldest line; ", dropped_,
                                             " reports dropped so far")};
  }
}

int64_t ReportQueue::ThinSteps() {
  // The newest step of each job stays: it is the job's latest on the coordinator.
  std::vector<std::string> jobs;
  std::vector<uint64_t> newest;
  for (auto it = reports_.rbegin(); it != reports_.rend(); ++it) {
    if (!it->request.has_step() ||
        std::find(jobs.begin(), jobs.end(), it->request.job_id()) != jobs.end()) {
      continue;
    }
    jobs.push_back(it->request.job_id());
    newest.push_back(it->seq);
  }
  const auto removable = [&](const Pending& r) {
    return r.request.has_step() && !r.request.step().has_val_loss() &&
           std::find(newest.begin(), newest.end(), r.seq) == newest.end();
  };
  if (std::none_of(reports_.begin(), reports_.end(), removable)) return 0;
  // Double the stride until some step goes (steps reported sparsely may all be multiples of
  // the next); it ends: a step is not a multiple of any stride above it.
  const size_t before = reports_.size();
  do {
    stride_ *= 2;
    reports_.erase(std::remove_if(reports_.begin(), reports_.end(),
                                  [&](const Pending& r) {
                                    return removable(r) && !Kept(r.request.step(), stride_);
                                  }),
                   reports_.end());
  } while (reports_.size() == before);
  return static_cast<int64_t>(before - reports_.size());
}

void ReportQueue::Warn(const std::string& job_id, const std::string& text) {
  Log(absl::StrCat("warning: ", text));
  ReportProgressRequest r;
  r.set_job_id(job_id);
  r.mutable_log()->set_severity(LOG_WARNING);
  r.mutable_log()->set_text(text);
  Push(std::move(r));
}

void ReportQueue::PushOutcome(const std::string& job_id, const JobOutcome& outcome) {
  ReportProgressRequest r;
  r.set_job_id(job_id);
  *r.mutable_outcome() = outcome;
  Push(std::move(r));
}

void ReportQueue::ReplaceFrontIf(uint64_t seq, ReportProgressRequest request) {
  if (reports_.empty() || reports_.front().seq != seq) return;
  MakeStringsValidUtf8(&request);
  reports_.front().request = std::move(request);
}

std::optional<ReportQueue::Batch> ReportQueue::Next(int max_steps) const {
  if (reports_.empty()) return std::nullopt;
  const ReportProgressRequest& first = reports_.front().request;
  Batch batch{reports_.front().seq, 1, first};
  if (max_steps < 2 || !first.has_step()) return batch;
  size_t n = 1;
  while (n < reports_.size() && n < static_cast<size_t>(max_steps)) {
    const ReportProgressRequest& next = reports_[n].request;
    if (!next.has_step() || !SameRun(next, first) ||
        next.step().step() <= reports_[n - 1].request.step().step()) {
      break;
    }
    ++n;
  }
  if (n == 1) return batch;
  StepRun* run = batch.request.mutable_steps();  // clears `step` (one report field)
  for (size_t i = 0; i < n; ++i) *run->add_steps() = reports_[i].request.step();
  batch.last_seq = reports_[n - 1].seq;
  batch.reports = static_cast<int>(n);
  return batch;
}

void ReportQueue::PopThrough(uint64_t seq) {
  while (!reports_.empty() && reports_.front().seq <= seq) reports_.pop_front();
  AfterRemoval();
}

void ReportQueue::AfterRemoval() {
  // The coordinator takes reports again: new steps are kept whole.
  if (size() <= options_.max_reports / 4) stride_ = 1;
}

void ReportQueue::DropJob(const std::string& job_id) {
  reports_.erase(std::remove_if(reports_.begin(), reports_.end(),
                                [&](const Pending& r) { return r.request.job_id() == job_id; }),
                 reports_.end());
  AfterRemoval();
}

bool ReportQueue::HasJob(const std::string& job_id) const {
  return std::any_of(reports_.begin(), reports_.end(),
                     [&](const Pending& r) { return r.request.job_id() == job_id; });
}

}  // namespace dtrain::worker
