// JobManager's ReportProgress: a rank's steps, events, logs, sealed checkpoints, location and
// outcome are recorded into the job; what follows from them (RUNNING, SUCCEEDED, a failure
// decided, a planned restart) is job_decision.h's, reconciled at once so that the last rank's
// success ends the job before its answer.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_limits.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/recovery.h"
#include "plan/ranks.h"

namespace dtrain::coordinator {
namespace {

// A StepRun as ReportProgressRequest.steps defines it (proto/coordinator.proto).
absl::Status CheckStepRun(const StepRun& run) {
  if (run.steps().empty() || run.steps_size() > kMaxStepRun) {
    return absl::InvalidArgumentError(absl::StrCat("a step run carries ", run.steps_size(),
                                                   " steps; 1 to ", kMaxStepRun, " are allowed"));
  }
  for (int i = 1; i < run.steps_size(); ++i) {
    if (run.steps(i).step() <= run.steps(i - 1).step()) {
      return absl::InvalidArgumentError(absl::StrCat("a step run goes from step ",
                                                     run.steps(i - 1).step(), " to step ",
                                                     run.steps(i).step(), ": not increasing"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReportProgressResponse> JobManager::ReportProgress(
    const ReportProgressRequest& request) {
  absl::StatusOr<ReportProgressResponse> recorded = RecordReport(request);
  // What the database could not record is the coordinator's fault, not the report's: its worker
  // keeps it and sends it again (UNAVAILABLE). A read-only database would otherwise answer
  // FAILED_PRECONDITION, which a worker reads as "this job is not yours" and, asked three
  // times, stops training it.
  if (!recorded.ok() && IsDatabaseError(recorded.status())) {
    return absl::UnavailableError(recorded.status().message());
  }
  return recorded;
}

absl::StatusOr<ReportProgressResponse> JobManager::RecordReport(
    const ReportProgressRequest& request) {
  if (request.worker_id().empty() || request.job_id().empty()) {
    return absl::InvalidArgumentError("worker_id and job_id must not be empty");
  }
  ReportProgressResponse response;
  JobsLock lock(this);
  const absl::Time now = Now();
  ActiveJob* job = FindActive(request.job_id());
  if (job == nullptr) {
    // Unknown: NotFound. Ended (cancelled, or failed by another rank): stop.
    RETURN_IF_ERROR(store_->GetJob(request.job_id(), /*with_history=*/false).status());
    response.set_cancelled(true);
    return response;
  }
  // The run the report comes from, where the worker says (ReportProgressRequest.attempt): one a
  // recovery replaced is never taken for the current one, even from a worker in both.
  const int current_run = static_cast<int>(job->recoveries.size());
  if (request.has_attempt() && (request.attempt() > current_run || request.attempt() < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("a report of run ", request.attempt(), " of ",
                                                   job->id, ", whose current run is ",
                                                   current_run));
  }
  const bool earlier_run = request.has_attempt() && request.attempt() < current_run;
  auto rank_it = job->rank_of.find(request.worker_id());
  if (rank_it == job->rank_of.end() || earlier_run) {
    ASSIGN_OR_RETURN(const bool recorded, RecordStoppedRunSteps(*job, request));
    // A worker of the current run too: its earlier run's other reports are dropped, answered
    // OK, since a refusal would count against the run it trains now.
    if (recorded || rank_it != job->rank_of.end()) return response;
    return absl::FailedPreconditionError(
        absl::StrCat(job->id, " has no rank on worker ", request.worker_id()));
  }
  const int rank = rank_it->second;
  ASSIGN_OR_RETURN(bool first,
                   registry_.Report(request.worker_id(), request.session_id(), job->id, now));
  const std::string id = job->id;
  if (first) MarkAcked(*job, request.worker_id());
  job = FindActive(id);
  if (job == nullptr) return response;  // (an ack cannot end a job; defensive)
  // A copy of a report recorded already (its answer was lost): answered, not recorded again.
  if (registry_.ReportRecorded(request.worker_id(), request.session_id(), request.report_seq())) {
    return response;
  }
  const Reporter from{rank,
                      absl::StrCat("worker ", request.worker_id(), " (",
                                   plan::RankLabel(job->assignment->placement().ranks(rank)), ")"),
                      {rank, request.worker_id(), LOG_INFO}};
  RETURN_IF_ERROR(ApplyReport(*job, from, request, now));
  registry_.NoteReportRecorded(request.worker_id(), request.session_id(), request.report_seq());
  return response;
}

// The run a recovery stops trains on until the stop reaches it (its next heartbeat), and may
// seal a step there that the new run resumes from: without the steps it reported meanwhile the
// job's curve would miss them. They are recorded as the stopped run's (no recovery
// bookkeeping) until the new run's first step, which replaces the rows from its own first step
// on; its other reports are not recorded (the log and the seals are the current run's). A
// worker that has a rank in the new run too is told apart by the report's attempt.
absl::StatusOr<bool> JobManager::RecordStoppedRunSteps(ActiveJob& job,
                                                       const ReportProgressRequest& request) {
  auto rank = job.recovery.stopped_rank_of.find(request.worker_id());
  if (rank == job.recovery.stopped_rank_of.end() || job.OpenRecovery() == nullptr) return false;
  std::vector<StepMetrics> steps;
  if (request.has_step()) {
    steps.push_back(request.step());
  } else if (request.has_steps()) {
    RETURN_IF_ERROR(CheckStepRun(request.steps()));
    steps.assign(request.steps().steps().begin(), request.steps().steps().end());
  } else {
    return false;
  }
  if (rank->second != job.recovery.stopped_reporting_rank ||
      registry_.ReportRecorded(request.worker_id(), request.session_id(), request.report_seq())) {
    return true;  // one rank speaks for the job; a copy
  }
  const int64_t now_ms = NowMs();
  for (StepMetrics& step : steps) {
    if (step.time_unix_ms() == 0) step.set_time_unix_ms(now_ms);
  }
  RETURN_IF_ERROR(store_->AppendMetrics(job.id, steps, /*drop_later=*/false));
  registry_.NoteReportRecorded(request.worker_id(), request.session_id(), request.report_seq());
  job.last_step = std::max(job.last_step, steps.back().step());
  NoteOldRunStep(job, steps.back().step());
  to_notify_.push_back(job.id);
  return true;
}

absl::Status JobManager::ApplyReport(ActiveJob& job, const Reporter& from,
                                     const ReportProgressRequest& request, absl::Time now) {
  const std::string id = job.id;  // a copy: an outcome may end the job
  // When it happened, however late it arrives (a worker before ReportProgressRequest's time:
  // when it arrived).
  const int64_t report_ms =
      request.time_unix_ms() > 0 ? request.time_unix_ms() : absl::ToUnixMillis(now);
  // A log line is the report a copy would record twice, however long after (steps and seals are
  // rows keyed by their step, replaced by a copy): its number is kept with it, in the same
  // transaction, so that a copy sent after a coordinator restart is known (Recover).
  const ReportMark mark{request.worker_id(), request.session_id(), request.report_seq()};
  const ReportMark* numbered = request.report_seq() > 0 ? &mark : nullptr;
  switch (request.report_case()) {
    case ReportProgressRequest::kStep:
      RETURN_IF_ERROR(OnSteps(job, from, {request.step()}));
      break;
    case ReportProgressRequest::kSteps:
      RETURN_IF_ERROR(CheckStepRun(request.steps()));
      RETURN_IF_ERROR(
          OnSteps(job, from, {request.steps().steps().begin(), request.steps().steps().end()}));
      break;
    case ReportProgressRequest::kEvent:
      RETURN_IF_ERROR(store_
                          ->AppendEvent(id, absl::StrCat(from.who, ": ", request.event()),
                                        report_ms, from.source, numbered)
                          .status());
      to_notify_.push_back(id);
      break;
    case ReportProgressRequest::kLog: {
      LineSource line = from.source;
      line.severity = request.log().severity();
      RETURN_IF_ERROR(store_
                          ->AppendEvent(id, absl::StrCat(from.who, ": ", request.log().text()),
                                        report_ms, line, numbered)
                          .status());
      to_notify_.push_back(id);
      break;
    }
    case ReportProgressRequest::kCheckpoint:
      RETURN_IF_ERROR(OnCheckpoint(job, request.checkpoint(), report_ms));
      break;
    case ReportProgressRequest::kLocation:
      RETURN_IF_ERROR(OnLocation(job, request.location()));
      break;
    case ReportProgressRequest::kCheckpointSkipped:
      RETURN_IF_ERROR(OnCheckpointSkipped(job, request.checkpoint_skipped()));
      break;
    case ReportProgressRequest::kCheckpointWait:
      if (request.checkpoint_wait().ended()) {
        job.space_wait.reset();
      } else {
        job.space_wait = request.checkpoint_wait();
      }
      break;
    case ReportProgressRequest::kOutcome:
      RETURN_IF_ERROR(OnOutcome(job, from, request));
      break;
    case ReportProgressRequest::REPORT_NOT_SET:
      return absl::InvalidArgumentError("report carries none of step, event, outcome");
  }
  return absl::OkStatus();
}

void JobManager::MarkAcked(ActiveJob& job, const std::string& worker_id) {
  auto it = job.rank_of.find(worker_id);
  if (it == job.rank_of.end()) return;
  job.MarkAcked(it->second);
  const std::string id = job.id;        // `job` is gone if the decision ended it
  absl::Status status = Reconcile(id);  // PLACING -> RUNNING once every rank has
  if (!status.ok()) Log(absl::StrCat(id, ": ", status.ToString()));
}

absl::Status JobManager::OnSteps(ActiveJob& job, const Reporter& from,
                                 std::vector<StepMetrics> steps) {
  if (from.rank != job.reporting_rank) return absl::OkStatus();  // one rank speaks for the job
  const absl::Time now = Now();
  for (StepMetrics& step : steps) {
    if (step.time_unix_ms() == 0) step.set_time_unix_ms(absl::ToUnixMillis(now));
  }
  const StepMetrics& step = steps.front();
  Recovery* r = job.OpenRecovery();
  // The first step of a recovery's run replaces the old run's rows from it on: the steps
  // after it are redone, and watchers are sent them again (coordinator_service.cc).
  RETURN_IF_ERROR(store_->AppendMetrics(job.id, steps, /*drop_later=*/r != nullptr));
  job.last_step = std::max(job.last_step, steps.back().step());
  job.diagnosis.progress_at = now;
  job.diagnosis.stall_diagnosed = false;
  job.diagnosis.summary.clear();
  if (r != nullptr) {
    // The recovery is done. Rank 0's location (the step it resumed from) may come later,
    // from another worker: the run resumed from the step before its first.
    if (!job.run_located) {
      r->set_resumed_from_step(step.step() - 1);
      r->set_steps_redone(std::max<int64_t>(0, r->last_step() - r->resumed_from_step()));
      r->set_load_ms(EndPhase(job));
    }
    r->set_first_step_ms(EndPhase(job));
    r->set_done(true);
    job.recovery.phase = RecoveryPhase::kNone;
    job.recovery.stopped_rank_of.clear();
    job.last_step = steps.back().step();
    SaveRecoveries(job);
    const int64_t total =
        r->detect_ms() + r->stop_ms() + r->place_ms() + r->load_ms() + r->first_step_ms();
    if (options_.metrics != nullptr) options_.metrics->JobRecovered(absl::Milliseconds(total));
    Event(job.id, absl::StrCat("recovery ", r->number(), " done: training again at step ",
                               step.step(), "; ", PhaseSummary(*r)));
  }
  to_notify_.push_back(job.id);
  return absl::OkStatus();
}

absl::Status JobManager::OnCheckpoint(ActiveJob& job, const CheckpointSealed& checkpoint,
                                      int64_t sealed_ms) {
  CheckpointInfo sealed;
  sealed.set_step(checkpoint.step());
  sealed.set_path(checkpoint.path());
  sealed.set_time_unix_ms(sealed_ms);
  sealed.set_dir_bytes(checkpoint.dir_bytes());
  RETURN_IF_ERROR(store_->AddCheckpoint(job.id, sealed, checkpoint.kept_steps()));
  job.sealed_step = std::max(job.sealed_step, sealed.step());
  job.AnswerCheckpointAsk(sealed.step());
  to_notify_.push_back(job.id);
  // The policies a sealed checkpoint wakes; the first to propose a restart has it.
  const std::string id = job.id;
  MaybeYield(job, sealed.step());  // first: a preempted job stops whatever else was planned
  MaybeGrowBack(job, sealed.step());
  MaybeRebalanceAt(job, sealed.step());
  MaybeMoveOffDrained(job);
  Reconcile(id).IgnoreError();  // logged; the pass decides again
  return absl::OkStatus();
}

absl::Status JobManager::OnCheckpointSkipped(ActiveJob& job, const CheckpointSkipped& skipped) {
  RETURN_IF_ERROR(store_->SetCheckpointSkipped(job.id, skipped.step(), skipped.reason()));
  // A `dtrain checkpoint` is answered, without a seal: it says why.
  job.AnswerCheckpointAsk(skipped.step());
  to_notify_.push_back(job.id);
  const std::string id = job.id;
  GoAheadWithoutSeal(job, skipped);
  Reconcile(id).IgnoreError();  // logged; the pass decides again
  return absl::OkStatus();
}

// The checkpoint asked for will not come (asking again would skip again, at every step, while
// the disk stays full). Waiting for the next interval's is no answer either: with interval 0
// there is none. So the plans that need the job's workers go ahead now and the steps since its
// latest sealed checkpoint are trained again; a re-cut, which only speeds the job up, is not
// worth those steps and is dropped.
void JobManager::GoAheadWithoutSeal(ActiveJob& job, const CheckpointSkipped& skipped) {
  if (!job.WaitsForNextSeal()) return;
  const std::string skip = absl::StrCat("the checkpoint of step ", skipped.step(), " was skipped (",
                                        skipped.reason(), ")");
  if (job.planned.pending_cut.has_value()) {
    job.planned.pending_cut.reset();
    Event(job.id, absl::StrCat("rebalance dropped: ", skip,
                               "; a later straggler window or `dtrain rebalance` decides again"));
  }
  if (job.planned.yield_to.empty() && job.planned.drain_at_seal.empty()) return;
  Event(job.id,
        absl::StrCat(skip, ": ", job.planned.yield_to.empty() ? "the drain" : "the preemption",
                     " goes ahead now, from ",
                     job.sealed_step > 0 ? absl::StrCat("the checkpoint of step ", job.sealed_step)
                                         : std::string("the start (none sealed)"),
                     "; steps ", job.sealed_step + 1, "-", std::max(job.last_step, skipped.step()),
                     " are trained again"));
  MaybeYield(job, job.sealed_step);  // first, as at a seal
  MaybeMoveOffDrained(job);
}

absl::Status JobManager::OnLocation(ActiveJob& job, const JobLocation& at) {
  Recovery* r = job.recoveries.empty() || job.run_located ? nullptr : &job.recoveries.back();
  job.run_located = true;
  int64_t resumed_from_step = at.resumed_from_step();
  if (!job.recoveries.empty()) {
    // Job.resumed_from_step stays the first run's (a resume_from of the spec).
    ASSIGN_OR_RETURN(Job stored, store_->GetJob(job.id, /*with_history=*/false));
    resumed_from_step = stored.resumed_from_step();
  }
  RETURN_IF_ERROR(store_->SetLocation(job.id, at.dir(), at.host(),
                                      job.spec.checkpoint().interval_steps(), resumed_from_step));
  if (r == nullptr || r->workers_size() == 0) return absl::OkStatus();
  // The new run loaded its checkpoint: the steps after it are trained again.
  r->set_resumed_from_step(at.resumed_from_step());
  r->set_steps_redone(std::max<int64_t>(0, r->last_step() - at.resumed_from_step()));
  // The run found the last step sealed (its seal was not reported before the failure): it only
  // finishes the job, which is no failure either.
  if (at.resumed_from_step() >= job.spec.steps()) r->set_finishing(true);
  if (!r->done()) {
    r->set_load_ms(EndPhase(job));
    job.recovery.phase = RecoveryPhase::kFirstStep;
    job.last_step = at.resumed_from_step();
  }
  SaveRecoveries(job);
  Event(job.id,
        absl::StrCat(
            "recovery ", r->number(), ": resumed from ",
            at.resumed_from_step() > 0
                ? absl::StrCat("step ", at.resumed_from_step(), " (", at.resumed_from(), ")")
                : "the start (no checkpoint sealed yet)",
            r->steps_redone() > 0
                ? absl::StrCat("; redoing steps ", at.resumed_from_step() + 1, "-", r->last_step())
                : ""));
  return absl::OkStatus();
}

absl::Status JobManager::OnOutcome(ActiveJob& job, const Reporter& from,
                                   const ReportProgressRequest& request) {
  const JobOutcome& outcome = request.outcome();
  registry_.Release(request.worker_id(), job.id, Now());
  Wake();
  if (!outcome.succeeded()) {
    RankFailure failure;
    failure.cause = CauseOf(outcome.kind());
    failure.rank = from.rank;
    failure.worker_id = request.worker_id();
    failure.error = outcome.error().empty() ? "no error message" : outcome.error();
    failure.error_code = outcome.error_code();
    failure.suspects.assign(outcome.suspect_workers().begin(), outcome.suspect_workers().end());
    AddFailure(job, std::move(failure));
    return absl::OkStatus();
  }
  job.MarkSucceeded(from.rank);
  if (from.rank == job.reporting_rank) job.end_reason = outcome.end_reason();
  if (!outcome.output().empty() && (from.rank == job.reporting_rank || job.output.empty())) {
    job.output = outcome.output();
    if (!outcome.output_host().empty()) {
      RETURN_IF_ERROR(store_->SetOutputHost(job.id, outcome.output_host()));
    }
  }
  return Reconcile(job.id);  // SUCCEEDED once every rank has, before the answer
}

}  // namespace dtrain::coordinator
