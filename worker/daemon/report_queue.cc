#include "worker/daemon/report_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace dtrain::worker {

ReportQueue::ReportQueue(Options options, std::function<void(const std::string&)> log)
    : options_(options), log_(std::move(log)) {}

void ReportQueue::Log(const std::string& line) const {
  if (log_) log_(line);
}

void ReportQueue::Push(ReportProgressRequest request) {
  if (!request.has_outcome() && size() >= std::max<int64_t>(1, options_.max_reports)) {
    auto oldest = std::find_if(reports_.begin(), reports_.end(),
                               [](const Pending& r) { return !r.request.has_outcome(); });
    if (oldest != reports_.end()) {
      const std::string job_id = oldest->request.job_id();
      reports_.erase(oldest);
      if (dropped_++ % 1000 == 0) {
        pending_warning_ = {job_id,
                            absl::StrCat("report buffer full (", options_.max_reports,
                                         "): dropping the oldest; ", dropped_, " dropped so far")};
      }
    }
  }
  // Text quoted from files and peers (a dataset path, a damaged manifest) in any field: a
  // string that is not UTF-8 makes the whole report unparseable at the coordinator.
  MakeStringsValidUtf8(&request);
  Pending r;
  r.seq = next_seq_++;
  r.request = std::move(request);
  reports_.push_back(std::move(r));
  if (!pending_warning_.first.empty()) {
    const auto [job_id, text] = std::move(pending_warning_);
    pending_warning_ = {};
    Warn(job_id, text);
  }
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

void ReportQueue::PopIf(uint64_t seq) {
  if (!reports_.empty() && reports_.front().seq == seq) reports_.pop_front();
}

void ReportQueue::DropJob(const std::string& job_id) {
  reports_.erase(std::remove_if(reports_.begin(), reports_.end(),
                                [&](const Pending& r) { return r.request.job_id() == job_id; }),
                 reports_.end());
}

bool ReportQueue::HasJob(const std::string& job_id) const {
  return std::any_of(reports_.begin(), reports_.end(),
                     [&](const Pending& r) { return r.request.job_id() == job_id; });
}

}  // namespace dtrain::worker
