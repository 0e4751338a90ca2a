// The job manager's recovery rules that need no state (FaultTolerance in proto/job.proto): who
// may run a recovering job, on which layout, and how recoveries read in a reason or an event.
//
//   RUNNING --a rank fails, a restart can cure it, restarts left--> RECOVERING
//     (stop: the surviving ranks are told to stop; wait until they did, at most a lease)
//     (place: idle workers fitting the device, minus WorkersFailedTwice; "shrink" takes fewer
//      data-parallel replicas at once when too few, "wait" waits up to wait_for)
//   RECOVERING --placed--> PLACING --every rank running--> RUNNING
//     (load: rank 0 reports the checkpoint step it resumed from; first step: the first new
//      step arrives and the recovery is done)
// Each phase's time is kept in the job's Recovery (Job.recoveries) and shown by the CLI.
#ifndef DTRAIN_COORDINATOR_RECOVERY_H_
#define DTRAIN_COORDINATOR_RECOVERY_H_

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace dtrain::coordinator {

// Whether a worker with a device of `kind` ("cpu", "cuda": DeviceInfo.kind) can run a job whose
// planned spec asks for `device` ("cpu", "cuda", "auto"): both parsed by plan/spec_enums.h,
// then plan::DeviceFits.
bool DeviceFits(absl::string_view device, absl::string_view kind);
// Whether a job of `device` runs on a worker of any kind (cpu and cuda alike: "auto").
bool AnyDevice(absl::string_view device);
// Whether jobs of devices `a` and `b` (JobSpec.device) could take the same worker.
bool SameWorkers(absl::string_view a, absl::string_view b);

// What a recovery is, as the bounded label `kind` of dtrain_coordinator_job_recoveries_total:
// "failure" (counted against max_restarts), or a restart the coordinator chose: "grow" (back to
// the submitted layout), "straggler_replaced", "rebalance" (a re-cut), "maintenance" (a worker
// drained or stopped on purpose), "preempted" (it yielded its workers to a job of a higher
// priority), "finishing" (the job's last step was sealed).
absl::string_view RecoveryKind(const Recovery& recovery);
inline constexpr absl::string_view kRecoveryKinds[] = {
    "failure", "grow", "straggler_replaced", "rebalance", "maintenance", "preempted", "finishing"};

// A restart the coordinator chose, not a failure (RecoveryKind is not "failure").
bool IsPlannedRestart(const Recovery& recovery);

// Recoveries that followed a failure (not IsPlannedRestart): what max_restarts counts.
int FailureCount(absl::Span<const Recovery> recoveries);

// Workers named as the cause of two of the job's failures (planned restarts aside): not placed on
// it again.
absl::flat_hash_set<std::string> WorkersFailedTwice(absl::Span<const Recovery> recoveries);

// The workers a straggler replace may not swap in (its spare, its new placement): those of
// WorkersFailedTwice and every worker the job already replaced as a straggler. A worker found
// slow on this job is not its spare again: swapped back in on a healthy rank's noisy window it
// would be flagged again, and the two would trade places for the rest of the run.
absl::flat_hash_set<std::string> NotSparesForReplace(absl::Span<const Recovery> recoveries);

// The spec of the job's current run: `spec` (as planned at submit) with its current layout
// (plan::JobCurrentLayout: the latest placed recovery's, which "shrink" may have made smaller).
JobSpec CurrentRunSpec(const JobSpec& spec, absl::Span<const Recovery> recoveries);

// "detect 1.2s, stop 0.3s, place 0.1s, load 0.8s, first step 0.5s (2.9s in all)".
std::string PhaseSummary(const Recovery& recovery);

// The FAILED reason of a job that recovered before: `reason` (the last failure), then one line
// per earlier failure ("  earlier failure 1 of 1 (recovered): worker w3 (dp0 pp1 tp0) lost:
// ..."); planned restarts (grow backs, stragglers replaced) are not failures and are left out.
std::string ReasonNamingEveryFailure(const std::string& reason,
                                     absl::Span<const Recovery> recoveries);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_RECOVERY_H_
