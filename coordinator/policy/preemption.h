// Which running jobs a queued job of a higher priority preempts (JobManager::Options
// ::preempt_after): a pure choice from the candidates the job manager found eligible (running,
// checkpointing, on workers the waiting job can use, yielding to nobody yet).
//
// A preempted job loses nothing: it stops at its next sealed checkpoint, waits like a queued job
// of its priority, and resumes from that checkpoint (a restart not counted against
// max_restarts). So the choice only weighs whose wait it starts: the lowest priorities first,
// then the runs started last (the least time on their workers so far), and no more of them than
// the waiting job needs.
#ifndef DTRAIN_COORDINATOR_POLICY_PREEMPTION_H_
#define DTRAIN_COORDINATOR_POLICY_PREEMPTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dtrain::coordinator {

struct PreemptionCandidate {
  std::string job_id;
  int32_t priority = 0;  // JobSpec.priority
  int64_t workers = 0;   // the workers its run holds
  absl::Time started;    // its run's start (RUNNING entered)
};

// The jobs to preempt so that a queued job of `priority` that needs `needed` workers gets them,
// with `available` workers it has already (idle and usable, or coming free from preemptions
// begun earlier): candidates of a lower priority only; none when even all of those would not
// free enough (nothing is stopped in vain). Among enough, the fewest the order above reaches:
// a victim the others make unnecessary is left running.
std::vector<std::string> ChoosePreemptions(int32_t priority, int64_t needed, int64_t available,
                                           std::vector<PreemptionCandidate> candidates);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_POLICY_PREEMPTION_H_
