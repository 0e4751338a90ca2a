// JobManager's SubmitJob helpers: a resume_from naming a job that has ended resolved to that
// job's latest sealed checkpoint.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/job_transitions.h"
#include "plan/job_plan.h"
#include "plan/spec_json.h"

namespace dtrain::coordinator {

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
