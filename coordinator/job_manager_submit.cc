// JobManager's SubmitJob: a spec planned and checked (coordinator/submit_spec.h), refused when
// no registered worker could ever hold it, a resume_from naming an ended job resolved to its
// latest sealed checkpoint, then the job saved QUEUED with the reason it waits.
#include <algorithm>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/job_transitions.h"
#include "coordinator/recovery.h"
#include "coordinator/submit_spec.h"
#include "plan/job_plan.h"
#include "plan/placement.h"
#include "plan/ranks.h"
#include "plan/spec_json.h"
#include "plan/spec_paths.h"

namespace dtrain::coordinator {
namespace {

// A random 128-bit id in hex: Job.uid, unique across databases.
std::string NewUid() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x%08x%08x", rd(), rd(), rd(), rd());
}

}  // namespace

std::optional<std::string> JobManager::NoWorkerCanHold(const JobPlan& job_plan) const {
  // Fast answer first (no copies): as many live workers with room for the largest rank as the
  // job has ranks means every rank fits.
  int64_t largest = 0;
  for (const StagePlan& stage : job_plan.stages()) {
    largest = std::max(largest, stage.memory().total());
  }
  const std::string& device = job_plan.spec().device();
  if (registry_.CountWithRoom(largest, [&](const WorkerInfo& w) {
        return DeviceFits(device, w.device().kind());
      }) >= plan::WorkersNeeded(job_plan.spec().parallel())) {
    return std::nullopt;
  }
  // Every live worker of the job's device kind as if idle, with the memory it would have with
  // nothing running on its host (MemoryShare, not idle).
  std::vector<WorkerInfo> able;
  absl::flat_hash_map<std::string, HostShare> hosts;
  for (const WorkerInfo& w : registry_.List()) {
    if (w.state() == LOST || !DeviceFits(job_plan.spec().device(), w.device().kind())) continue;
    able.push_back(w);
    HostShare& host = hosts[w.host_id()];
    host.host_bytes = std::max(host.host_bytes, w.host_memory_bytes());
    ++host.live;
  }
  if (static_cast<int64_t>(able.size()) < plan::WorkersNeeded(job_plan.spec().parallel())) {
    return std::nullopt;  // too few workers: SubmitJob warns about that
  }
  for (WorkerInfo& w : able) {
    if (w.device().kind() != "cpu" || w.host_id().empty()) continue;
    w.mutable_device()->set_memory_bytes(
        MemoryShare(w.offered_memory_bytes(), hosts.at(w.host_id()), /*idle=*/false));
    w.set_state(IDLE);
  }
  absl::StatusOr<plan::PlacementResult> placed = plan::PlaceJob(job_plan, able);
  if (placed.ok() || !absl::IsResourceExhausted(placed.status())) return std::nullopt;
  std::string message(placed.status().message());
  absl::StrReplaceAll({{"idle worker", "worker"}}, &message);
  return message;
}

std::string JobManager::ReasonAtSubmit(const JobSpec& spec, const std::string& owner,
                                       const WorkerCounts& counts) {
  const int64_t needed = plan::WorkersNeeded(spec.parallel());
  const ActiveJob* holder = HolderFor(spec, counts);
  const std::optional<std::string> over =
      OwnerQuotaWait(owner, needed, WorkersHeldByOwner()[owner]);
  return over.has_value()    ? *over
         : holder != nullptr ? HeldBackReason(spec, *holder, counts, PreemptionsOf(*holder).holds)
         : counts.idle >= needed ? std::string(kPlacingNow)
                                 : WaitingReason(spec, counts);
}

absl::StatusOr<SubmitJobResponse> JobManager::SubmitJob(
    const SubmitJobRequest& request, absl::Time deadline, const std::string& owner,
    const std::function<absl::Status(const JobSpec&)>& may_submit) {
  ASSIGN_OR_RETURN(JobPlan job_plan,
                   PlanSubmission(request, options_.max_spec_bytes, options_.job_limits));
  std::optional<std::string> too_big = NoWorkerCanHold(job_plan);
  if (too_big.has_value() && !request.allow_waiting()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no registered worker can ever hold this job: ", *too_big,
                     " (submit with --allow_waiting to queue it for workers that may join)"));
  }
  JobSpec spec = std::move(*job_plan.mutable_spec());
  if (may_submit != nullptr) RETURN_IF_ERROR(may_submit(spec));
  if (std::optional<std::string> over =
          OwnerQuotaWait(owner, plan::WorkersNeeded(spec.parallel()), /*held=*/0)) {
    return absl::FailedPreconditionError(absl::StrCat(owner, "'s job cannot run here: ", *over));
  }
  std::vector<std::string> notes;
  RETURN_IF_ERROR(ResolveResumeFrom(&spec, &notes));
  const int64_t needed = plan::WorkersNeeded(spec.parallel());
  SubmitJobResponse response;
  JobsLock lock(this);
  if (absl::Now() >= deadline) {
    return absl::DeadlineExceededError(
        "the client's deadline passed while the spec was checked; no job was created");
  }
  const WorkerCounts counts = registry_.Counts();
  // Live workers that could ever run it (its device kind), to warn when there are too few, and
  // for the paths rule the roots of those that declared any: each must allow every path.
  const WorkerRegistry::LiveRoots live = registry_.RootsOfLive(
      [&](const WorkerInfo& w) { return DeviceFits(spec.device(), w.device().kind()); });
  const int64_t able = live.count;
  // Paths outside any such worker's roots, or climbing out with "..": refused now rather than
  // failing on the worker (which checks them again after symlinks).
  RETURN_IF_ERROR(plan::CheckSpecPaths(spec, live.roots));
  if (able < needed) {
    const bool any_device = AnyDevice(spec.device());
    const std::string worker =
        any_device ? "worker"
                   : absl::StrCat(DeviceFits(spec.device(), "cuda") ? "cuda" : "cpu", " worker");
    response.add_warnings(absl::StrCat("the job needs ", Plural(needed, worker), " and ",
                                       Plural(able, worker), able == 1 ? " is" : " are",
                                       " registered: it stays QUEUED until enough register"));
  }
  if (std::optional<std::string> off = plan::CheckpointsOffWarning(spec)) {
    response.add_warnings(*off);
  }
  if (too_big.has_value()) {
    response.add_warnings(absl::StrCat("no registered worker can hold this job: ", *too_big,
                                       "; it stays QUEUED until workers with room register"));
  }
  const std::string reason = ReasonAtSubmit(spec, owner, counts);
  ASSIGN_OR_RETURN(Job job, store_->CreateJob(spec, reason, NowMs(), NewUid(), owner));
  for (const std::string& note : notes) Event(job.id(), note);
  for (const std::string& warning : response.warnings()) Event(job.id(), warning);
  ActiveJob active;
  active.id = job.id();
  active.uid = job.uid();
  active.owner = job.owner();
  active.spec = spec;
  active.run_spec = spec;
  active.submitted = absl::FromUnixMillis(job.submitted_unix_ms());
  active.state = QUEUED;
  active.reason = reason;
  jobs_.emplace(JobNumber(job.id()), std::move(active));
  Log(absl::StrCat(job.id(), ": submitted \"", spec.name(), "\"",
                   owner.empty() ? "" : absl::StrCat(" by ", owner), " needing ",
                   Plural(needed, "worker"), ": ", reason));
  if (options_.metrics != nullptr) options_.metrics->JobSubmitted();
  Wake();
  AddLiveState(&job);
  *response.mutable_job() = std::move(job);
  return response;
}

absl::Status JobManager::ResolveResumeFrom(JobSpec* spec, std::vector<std::string>* notes) {
  const std::string from = spec->resume_from();
  if (!IsJobId(from)) return absl::OkStatus();  // a path on the workers: they check it
  absl::StatusOr<Job> source = store_->GetJob(from, /*with_history=*/false);
  if (absl::IsNotFound(source.status())) {
    // One spelling per id (JobNumberOf): "job-12" is named as the id it was meant to be.
    const std::optional<int64_t> spelled = JobNumberIn(from);
    const bool other_spelling = spelled.has_value() && JobIdFor(*spelled) != from;
    return plan::InvalidSpec(absl::StrCat(
        "resume_from=\"", from, "\": there is no such job",
        other_spelling ? absl::StrCat(" (job ids are written ", JobIdFor(*spelled), ")") : ""));
  }
  RETURN_IF_ERROR(source.status());
  if (!IsFinal(source->state())) {
    // Its newest steps are still to come, and its retention removes older ones under a copy
    // that waits in the queue.
    return plan::InvalidSpec(
        absl::StrCat("resume_from=\"", from, "\": ", from, " is ", JobState_Name(source->state()),
                     ": resume it once it has ended (`dtrain cancel ", from, "` ends it now)"));
  }
  ASSIGN_OR_RETURN(std::vector<CheckpointInfo> sealed, store_->Checkpoints(from));
  if (sealed.empty()) {
    return plan::InvalidSpec(absl::StrCat(
        "resume_from=\"", from, "\": ", from, " has no sealed checkpoint to resume from (",
        source->spec().checkpoint().dir().empty()
            ? "its spec has no checkpoint.dir"
            : absl::StrCat("none was sealed in ", source->checkpoint().dir().empty()
                                                      ? source->spec().checkpoint().dir()
                                                      : source->checkpoint().dir()),
        ")"));
  }
  const CheckpointInfo& latest = sealed.back();
  if (spec->steps() <= latest.step()) {
    return plan::InvalidSpec(
        absl::StrCat("steps=", spec->steps(), " is not beyond step ", latest.step(), " of ", from,
                     "'s latest sealed checkpoint (", latest.path(),
                     "): there is nothing to train (set steps above ", latest.step(), ")"));
  }
  spec->set_resume_from(latest.path());
  notes->push_back(absl::StrCat("resume_from ", from, " is its latest sealed checkpoint: step ",
                                latest.step(), " at ", latest.path(),
                                source->checkpoint().host().empty()
                                    ? ""
                                    : absl::StrCat(" on ", source->checkpoint().host())));
  return absl::OkStatus();
}

}  // namespace dtrain::coordinator
