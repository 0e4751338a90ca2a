#include "coordinator/job_transitions.h"

#include "absl/strings/str_cat.h"

namespace dtrain::coordinator {

bool IsFinal(JobState state) { return state == SUCCEEDED || state == FAILED || state == CANCELLED; }

bool IsAllowedTransition(JobState from, JobState to) {
  if (IsFinal(from) || from == JOB_STATE_UNSPECIFIED || to == JOB_STATE_UNSPECIFIED) return false;
  if (to == FAILED || to == CANCELLED) return true;
  switch (from) {
    case QUEUED:  // no rank runs yet: it can only be placed (or restate what it waits for)
      return to == QUEUED || to == PLACING;
    case PLACING:  // every rank of a short run may report success before the last one's ack
      return to == RUNNING || to == RECOVERING || to == SUCCEEDED;
    case RUNNING:
      return to == RECOVERING || to == SUCCEEDED;
    case RECOVERING:
      return to == RECOVERING || to == PLACING || to == SUCCEEDED;
    default:
      return false;
  }
}

absl::Status CheckTransition(JobState from, JobState to) {
  if (IsFinal(from)) {
    return absl::FailedPreconditionError(absl::StrCat("already ended ", JobState_Name(from),
                                                      "; cannot move it to ", JobState_Name(to)));
  }
  if (!IsAllowedTransition(from, to)) {
    return absl::InternalError(absl::StrCat("a job cannot move from ", JobState_Name(from), " to ",
                                            JobState_Name(to),
                                            " (not in the job lifecycle's transition table)"));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::coordinator
