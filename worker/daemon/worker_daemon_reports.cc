// WorkerDaemon's delivery of its reports (the top of worker_daemon.h says how they flow): the
// queue's batches sent to the coordinator, each answer sorted into delivered, retried later,
// sent again shorter, dropped, or a refusal of the job (registering again to re-attach it, then
// disowning it).
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/daemon/worker_daemon.h"

namespace dtrain::worker {
namespace {

// Reports of the running job refused this many times in a row, with a successful registration
// before each retry, mean the coordinator no longer assigns it here.
constexpr int kRefusalsBeforeDisowning = 3;

// The same report answered INTERNAL this many times is sent in a shorter form (SendReports).
constexpr int kInternalAnswersBeforeShortening = 3;
constexpr char kShortened[] =
    " [shortened to ASCII: the coordinator answered INTERNAL to the full report]";

// A report answered so is kept and sent again later: the coordinator is down, slow, restarting
// or in trouble (its database damaged: DATA_LOSS), or answered what this worker does not expect
// (PERMISSION_DENIED, UNIMPLEMENTED...). Only NOT_FOUND and FAILED_PRECONDITION say that it does
// not know this session or job (a refusal, SendReports), and INVALID_ARGUMENT and OUT_OF_RANGE
// that the report itself is bad; guessing a refusal from anything else would stop a job the
// coordinator still counts on.
bool IsTransient(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return false;
    default:
      return true;
  }
}

}  // namespace

void WorkerDaemon::EnqueueOfLocked(const ActiveJob& job, ReportProgressRequest request) {
  request.set_job_id(job.id);
  request.set_attempt(job.attempt);
  EnqueueLocked(std::move(request));
}

void WorkerDaemon::EnqueueLocked(ReportProgressRequest request) {
  reports_.Push(std::move(request));
  wake_ = true;
}

void WorkerDaemon::WarnLocked(const std::string& job_id, const std::string& text) {
  reports_.Warn(job_id, text);
  wake_ = true;
}

void WorkerDaemon::DropReportsLocked(const std::string& job_id) {
  reports_.DropJob(job_id);
  wake_ = true;
}

void WorkerDaemon::SendReports(absl::Time until) {
  while (true) {
    ReportProgressRequest request;
    uint64_t seq;
    int64_t epoch;
    bool run;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      if (!registered_ || reports_.empty() || now >= until || now < reports_retry_at_) return;
      if (singles_through_.has_value() && reports_.front()->seq > *singles_through_) {
        singles_through_.reset();
      }
      std::optional<ReportQueue::Batch> next =
          reports_.Next(singles_through_.has_value() ? 1 : kMaxStepRun);
      request = std::move(next->request);
      seq = next->last_seq;
      run = next->reports > 1;
      epoch = epoch_;
    }
    request.set_worker_id(options_.worker_id);
    request.set_session_id(session_id_);
    request.set_report_seq(seq);  // a copy sent again after a lost answer is recorded once
    absl::StatusOr<ReportProgressResponse> response = client_->ReportProgress(request);

    absl::MutexLock lock(&mu_);
    if (!response.ok() && run &&
        (absl::IsInvalidArgument(response.status()) || absl::IsInternal(response.status()))) {
      // An older coordinator (no StepRun) or a step it cannot take: these steps one by one,
      // so that only a bad step itself is dropped; the steps after them in a run again.
      singles_through_ = seq;
      LogLine(options_.worker_id,
              absl::StrCat("coordinator refused ", request.steps().steps_size(), " steps of job ",
                           request.job_id(), " sent at once (", response.status().message(),
                           "); sending steps one by one"));
      continue;
    }
    if (response.ok()) {
      reports_.PopThrough(seq);
      if (job_ != nullptr && job_->id == request.job_id()) {
        job_->refusals = 0;
        job_->refused_in_epoch = -1;
      }
      if (response->cancelled()) {
        CancelByCoordinatorLocked(request.job_id(), "cancelled by the coordinator");
      }
      continue;
    }
    const absl::Status& s = response.status();
    if (absl::IsInternal(s)) {
      // Not a refusal of the job: the coordinator (or gRPC on the way) could not take this
      // report. Retried as an outage would be; the same report answered so a few times is sent
      // shorter: an outcome keeps its verdict with its text in ASCII, once; anything else is
      // dropped with a line saying so.
      if (internal_seq_ != seq) internal_answers_ = 0;
      internal_seq_ = seq;
      const bool shortened =
          request.has_outcome() && absl::EndsWith(request.outcome().error(), kShortened);
      if (++internal_answers_ >= kInternalAnswersBeforeShortening && !shortened) {
        internal_answers_ = 0;
        const std::string why = s.message().empty() ? "INTERNAL" : std::string(s.message());
        if (request.has_outcome()) {
          ReportProgressRequest shorter;
          shorter.set_job_id(request.job_id());
          *shorter.mutable_outcome() = request.outcome();
          shorter.mutable_outcome()->set_error(absl::StrCat(
              absl::CHexEscape(request.outcome().error().substr(0, 2000)), kShortened));
          LogLine(options_.worker_id,
                  absl::StrCat("coordinator answered INTERNAL to the outcome "
                               "of job ",
                               request.job_id(), " (", why, "); sending it shortened to ASCII"));
          reports_.ReplaceFrontIf(seq, std::move(shorter));
        } else {
          reports_.PopThrough(seq);
          WarnLocked(request.job_id(),
                     absl::StrCat("dropping a report the coordinator cannot take (", why, ")"));
        }
        continue;
      }
      reports_retry_at_ = until;
      return;
    }
    if (IsTransient(s)) {
      // Kept; the next heartbeat finds out whether the coordinator is gone.
      reports_retry_at_ = until;
      return;
    }
    if (absl::IsInvalidArgument(s) || absl::IsOutOfRange(s)) {
      reports_.PopThrough(seq);
      WarnLocked(request.job_id(),
                 absl::StrCat("dropping a report the coordinator refuses: ", s.message()));
      continue;
    }
    // NOT_FOUND / FAILED_PRECONDITION: this session or this job is unknown to it.
    if (deregistered_) {
      LogLine(options_.worker_id,
              absl::StrCat("coordinator refuses reports of job ", request.job_id(),
                           " after this worker deregistered (", s.message(), "); dropping them"));
      DropReportsLocked(request.job_id());
      continue;
    }
    const bool ours =
        job_ != nullptr && job_->id == request.job_id() && !job_->cancelled_by_coordinator;
    if (!ours) {
      DropReportsLocked(request.job_id());
      continue;
    }
    // Counted once per registration epoch, so that a session lost again (another restart)
    // soon after registering again does not quickly add up to "not ours".
    if (job_->refused_in_epoch == epoch) return;  // wait for the registration under way
    job_->refused_in_epoch = epoch;
    if (++job_->refusals < kRefusalsBeforeDisowning) {
      WarnLocked(job_->id, absl::StrCat("coordinator refused a report of job ", job_->id, " (",
                                        s.message(), "); registering again to re-attach it"));
      if (epoch == epoch_) registered_ = false;
      return;
    }
    LogLine(options_.worker_id,
            absl::StrCat("coordinator refused job ", job_->id, " from this worker ", job_->refusals,
                         " times, registering again in between (", s.message(),
                         "); stopping it and dropping its reports"));
    CancelByCoordinatorLocked(job_->id, "no longer assigned to this worker by the coordinator");
    DropReportsLocked(request.job_id());
  }
}

}  // namespace dtrain::worker
