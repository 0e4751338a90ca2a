#include "coordinator/job_decision.h"

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/job_transitions.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);
const DecisionLimits kLimits{absl::Seconds(10), absl::Seconds(2)};

struct Row {
  std::string name;  // the transition (README "States") and what was observed
  std::function<void(JobRecord&, ClusterView&)> observe;
  JobState state;
  Action action;
  JobState to;
  absl::Duration since = absl::ZeroDuration();  // now - kT0
};

JobRecord Running(int ranks) {
  JobRecord r;
  r.state = RUNNING;
  r.ranks = ranks;
  r.acked = ranks;
  return r;
}

// Every transition the README's "States" and job_manager.h document, as (state, observation)
// -> action and the state it leads to: a job before and at the start of its run,
std::vector<Row> QueuedAndPlacingRows() {
  return {
      {"QUEUED waits for idle workers",
       [](JobRecord& j, ClusterView& c) {
         c = {true, 0, 1, 2};
       },
       QUEUED, Action::kWait, QUEUED},
      {"QUEUED -> PLACING: enough idle workers",
       [](JobRecord& j, ClusterView& c) {
         c = {true, 0, 2, 2};
       },
       QUEUED, Action::kPlace, PLACING},
      {"QUEUED waits when the placement was deferred (memory)",
       [](JobRecord& j, ClusterView& c) { c = {true, 0, 2, 2, 0, true}; }, QUEUED, Action::kWait,
       QUEUED},
      {"QUEUED -> CANCELLED", [](JobRecord& j, ClusterView&) { j.cancel_requested = true; }, QUEUED,
       Action::kCancel, CANCELLED},
      {"PLACING waits for acks", [](JobRecord& j, ClusterView&) { j.ranks = 2, j.acked = 1; },
       PLACING, Action::kWait, PLACING},
      {"PLACING -> RUNNING: every rank acked",
       [](JobRecord& j, ClusterView&) { j.ranks = 2, j.acked = 2; }, PLACING, Action::kMarkRunning,
       RUNNING},
      {"PLACING -> SUCCEEDED: a short run reported before the last ack",
       [](JobRecord& j, ClusterView&) { j.ranks = 2, j.acked = 1, j.succeeded = 2; }, PLACING,
       Action::kEndSucceeded, SUCCEEDED},
      {"RUNNING -> SUCCEEDED: every rank succeeded",
       [](JobRecord& j, ClusterView&) { j = Running(2), j.succeeded = 2; }, RUNNING,
       Action::kEndSucceeded, SUCCEEDED},
      {"RUNNING waits for the other rank's outcome",
       [](JobRecord& j, ClusterView&) { j = Running(2), j.succeeded = 1; }, RUNNING, Action::kWait,
       RUNNING},
  };
}

// a run's failures and restarts,
std::vector<Row> FailureRows() {
  return {
      {"RUNNING: a rank's own failure is decided at once",
       [](JobRecord& j, ClusterView&) {
         j = Running(2), j.failures = 1, j.failed_workers = 1, j.conclusive_failure = true;
       },
       RUNNING, Action::kDecideFailure, RUNNING},
      {"RUNNING: a failure because of a peer waits for the root cause",
       [](JobRecord& j, ClusterView&) {
         j = Running(3), j.failures = 1, j.failed_workers = 1;
         j.decide_failure_at = kT0 + absl::Seconds(1);
       },
       RUNNING, Action::kWait, RUNNING},
      {"RUNNING: the root cause's window is over",
       [](JobRecord& j, ClusterView&) {
         j = Running(3), j.failures = 1, j.failed_workers = 1;
         j.decide_failure_at = kT0 + absl::Seconds(1);
       },
       RUNNING, Action::kDecideFailure, RUNNING, absl::Seconds(1)},
      {"RUNNING: the window waits for a timeout's diagnosis",
       [](JobRecord& j, ClusterView&) {
         j = Running(3), j.failures = 1, j.failed_workers = 1, j.awaits_diagnosis = true;
         j.decide_failure_at = kT0;
       },
       RUNNING, Action::kWait, RUNNING, absl::Seconds(1)},
      {"RUNNING: every rank failed because of a peer",
       [](JobRecord& j, ClusterView&) { j = Running(2), j.failures = 2, j.failed_workers = 2; },
       RUNNING, Action::kDecideFailure, RUNNING},
      {"RUNNING -> CANCELLED",
       [](JobRecord& j, ClusterView&) { j = Running(2), j.cancel_requested = true; }, RUNNING,
       Action::kCancel, CANCELLED},
      {"RUNNING -> RECOVERING: a policy planned a restart (grow, rebalance, drain, replace)",
       [](JobRecord& j, ClusterView&) { j = Running(2), j.planned_restart = true; }, RUNNING,
       Action::kBeginRecovery, RECOVERING},
      {"PLACING -> RECOVERING: a planned restart before the run started",
       [](JobRecord& j, ClusterView&) { j.ranks = 2, j.planned_restart = true; }, PLACING,
       Action::kBeginRecovery, RECOVERING},
  };
}

// a coordinator restart's re-attach,
std::vector<Row> CoordinatorRestartRows() {
  return {
      {"restart: RUNNING waits a lease for its workers to re-attach",
       [](JobRecord& j, ClusterView&) {
         j = Running(2), j.awaiting = 1, j.recover_deadline = kT0 + absl::Seconds(10);
       },
       RUNNING, Action::kWait, RUNNING, absl::Seconds(9)},
      {"restart: every worker re-attached, the job goes on",
       [](JobRecord& j, ClusterView&) { j = Running(2), j.awaiting = 0; }, RUNNING, Action::kWait,
       RUNNING, absl::Seconds(11)},
      {"restart: PLACING -> RUNNING once its re-attached workers acked",
       [](JobRecord& j, ClusterView&) { j.ranks = 2, j.acked = 2; }, PLACING, Action::kMarkRunning,
       RUNNING},
      {"restart: a worker not back within the lease fails the run",
       [](JobRecord& j, ClusterView&) {
         j = Running(2), j.awaiting = 1, j.recover_deadline = kT0 + absl::Seconds(10);
       },
       RUNNING, Action::kWorkersNotReturned, RUNNING, absl::Seconds(11)},
      {"restart: a worker back without the job fails the run",
       [](JobRecord& j, ClusterView&) { j = Running(2), j.awaiting = 1, j.abandoned = true; },
       RUNNING, Action::kWorkersNotReturned, RUNNING},
  };
}

// a preempted job's recovery, which waits as a queued job of its priority would,
std::vector<Row> PreemptedRows() {
  return {
      {"RECOVERING (preempted) waits for workers past wait_for, as a queued job does",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kPlace, j.phase_start = kT0, j.preempted = true, j.shrink = true,
         c = {true, 0, 1, 2, 1};
       },
       RECOVERING, Action::kWait, RECOVERING, absl::Hours(5)},
      {"RECOVERING (preempted) waits behind a queued job of a higher priority",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kPlace, j.phase_start = kT0, j.preempted = true,
         c = {true, 0, 2, 2}, c.queued_ahead = 1;
       },
       RECOVERING, Action::kWait, RECOVERING},
      {"RECOVERING (preempted) -> PLACING: enough idle workers, nobody ahead",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kPlace, j.phase_start = kT0, j.preempted = true,
         c = {true, 0, 2, 2};
       },
       RECOVERING, Action::kPlace, PLACING, absl::Hours(5)},
  };
}

// a recovery's phases, and what any state does with a cancel or a refused end.
std::vector<Row> RecoveringRows() {
  auto none = [](JobRecord&, ClusterView&) {};
  return {
      {"RECOVERING stop phase waits for the old ranks",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kStop, j.phase_start = kT0, c.known = true,
         c.old_ranks_running = 1;
       },
       RECOVERING, Action::kWait, RECOVERING, absl::Seconds(1)},
      {"RECOVERING stop phase ends when they stopped",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kStop, j.phase_start = kT0, c.known = true;
       },
       RECOVERING, Action::kEndStopPhase, RECOVERING},
      {"RECOVERING stop phase ends after a lease anyway",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kStop, j.phase_start = kT0, c.known = true,
         c.old_ranks_running = 1;
       },
       RECOVERING, Action::kEndStopPhase, RECOVERING, absl::Seconds(10)},
      {"RECOVERING -> PLACING: placed again",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kPlace, j.phase_start = kT0, c = {true, 0, 2, 2};
       },
       RECOVERING, Action::kPlace, PLACING},
      {"RECOVERING waits for workers (wait)",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kPlace, j.phase_start = kT0, c = {true, 0, 1, 2};
       },
       RECOVERING, Action::kWait, RECOVERING, absl::Seconds(59)},
      {"RECOVERING -> FAILED: no workers within wait_for",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kPlace, j.phase_start = kT0, c = {true, 0, 1, 2};
       },
       RECOVERING, Action::kFailRecovery, FAILED, absl::Seconds(60)},
      {"RECOVERING (shrink) settles before shrinking",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kPlace, j.phase_start = kT0, j.shrink = true,
         c = {true, 0, 1, 2, 1};
       },
       RECOVERING, Action::kWait, RECOVERING, absl::Seconds(1)},
      {"RECOVERING -> PLACING on fewer workers (shrink)",
       [](JobRecord& j, ClusterView& c) {
         j.phase = RecoveryPhase::kPlace, j.phase_start = kT0, j.shrink = true,
         c = {true, 0, 1, 2, 1};
       },
       RECOVERING, Action::kPlaceShrunk, PLACING, absl::Seconds(2)},
      {"RECOVERING -> CANCELLED", [](JobRecord& j, ClusterView&) { j.cancel_requested = true; },
       RECOVERING, Action::kCancel, CANCELLED},
      {"a final state the store refused is retried first",
       [](JobRecord& j, ClusterView&) {
         j = Running(2), j.pending_end = true, j.pending_end_state = FAILED,
         j.cancel_requested = true;
       },
       RUNNING, Action::kRetryEnd, FAILED},
      {"an RPC handler's decision places nothing",
       [](JobRecord& j, ClusterView& c) {
         c = {false, 0, 5, 1};
       },
       QUEUED, Action::kWait, QUEUED},
      {"an RPC handler's decision ends no recovery phase",
       [](JobRecord& j, ClusterView&) { j.phase = RecoveryPhase::kStop; }, RECOVERING,
       Action::kWait, RECOVERING},
      {"an ended job: nothing follows", none, SUCCEEDED, Action::kWait, SUCCEEDED},
  };
}

std::vector<Row> Table() {
  std::vector<Row> rows;
  for (auto part :
       {QueuedAndPlacingRows, FailureRows, CoordinatorRestartRows, PreemptedRows, RecoveringRows}) {
    for (Row& row : part()) rows.push_back(std::move(row));
  }
  return rows;
}

TEST(JobDecision, TableOfStateAndObservationToAction) {
  for (const Row& row : Table()) {
    JobRecord job;
    ClusterView cluster;
    row.observe(job, cluster);
    job.state = row.state;
    const Decision d = Decide(job, cluster, kT0 + row.since, kLimits);
    EXPECT_EQ(ActionName(d.action), ActionName(row.action)) << row.name;
    EXPECT_EQ(JobState_Name(d.to), JobState_Name(row.to)) << row.name;
    if (d.to != row.state) {
      EXPECT_TRUE(IsAllowedTransition(row.state, d.to)) << row.name;
    }
  }
}

TEST(JobDecision, WhatAFailureMeans) {
  FailureFacts f;
  f.curable = true;
  f.max_restarts = 3;
  EXPECT_EQ(DecideAfterFailure(f).restart, RestartKind::kFailure);  // RUNNING -> RECOVERING
  EXPECT_EQ(DecideAfterFailure(f).to, RECOVERING);
  f.failures_used = 3;
  EXPECT_EQ(DecideAfterFailure(f).action, Action::kEndFailed);  // restarts used up -> FAILED
  f.stopped = true;
  EXPECT_EQ(DecideAfterFailure(f).restart, RestartKind::kMaintenance);  // not counted
  f.curable = false;
  EXPECT_EQ(DecideAfterFailure(f).action, Action::kEndFailed);  // bad input -> FAILED
  f.final_step_sealed = true;
  EXPECT_EQ(DecideAfterFailure(f).restart, RestartKind::kFinishing);  // done is done
}

// One observation, any of them, whatever the state.
void Observe(std::mt19937& random, JobRecord& job, ClusterView& cluster, absl::Time& now) {
  switch (random() % 14) {
    case 0:
      job.acked = std::min(job.ranks, job.acked + 1);
      break;
    case 1:
      job.succeeded = std::min(job.ranks, job.succeeded + 1);
      break;
    case 2:
      ++job.failures;
      job.failed_workers = std::min(job.ranks, job.failed_workers + 1);
      job.conclusive_failure |= random() % 3 == 0;
      if (job.decide_failure_at == absl::InfiniteFuture()) {
        job.decide_failure_at = now + absl::Seconds(1);
      }
      break;
    case 3:
      job.cancel_requested = random() % 8 == 0;
      break;
    case 4:
      now += absl::Seconds(static_cast<int>(random() % 30));
      break;
    case 5:
      cluster = {random() % 5 != 0,
                 static_cast<int>(random() % 3),
                 static_cast<int>(random() % 5),
                 1 + static_cast<int>(random() % 4),
                 static_cast<int>(random() % 3),
                 random() % 4 == 0};
      break;
    case 7:
      job.awaiting = job.ranks, job.recover_deadline = now + absl::Seconds(10);
      break;
    case 8:
      job.awaiting = std::max(0, job.awaiting - 1);
      break;
    case 9:
      job.abandoned = random() % 6 == 0;
      break;
    case 10:
      job.planned_restart = random() % 3 == 0;
      break;
    case 11:
      job.awaits_diagnosis = random() % 2 == 0;
      break;
    case 12:
      job.shrink = random() % 2 == 0;
      break;
    default:
      break;  // a pass with nothing new
  }
}

// A model of JobManager::Apply's effect on the record: the state the decision names, the run's
// record reset as the manager resets it.
void ApplyToRecord(const Decision& d, const ClusterView& cluster, absl::Time now, JobRecord& job) {
  switch (d.action) {
    case Action::kPlace:
    case Action::kPlaceShrunk:
      job.ranks = d.action == Action::kPlace ? cluster.needed : cluster.shrunk_needed;
      job.acked = job.succeeded = job.failures = job.failed_workers = 0;
      job.conclusive_failure = false;
      job.decide_failure_at = absl::InfiniteFuture();
      job.phase = job.state == RECOVERING ? RecoveryPhase::kLoad : RecoveryPhase::kNone;
      break;
    case Action::kBeginRecovery:
      job = JobRecord{RECOVERING};
      job.phase = RecoveryPhase::kStop;
      job.phase_start = now;
      break;
    case Action::kEndStopPhase:
      job.phase = RecoveryPhase::kPlace;
      job.phase_start = now;
      break;
    default:
      break;
  }
  job.state = d.to;
}

// The property: whatever the handlers observe, in whatever order, Decide (and
// DecideAfterFailure after it) never asks for a transition outside job_transitions' table, and
// with a model of Apply every job's walk stays inside it until it ends.
TEST(JobDecision, NoSequenceOfObservationsLeavesTheTable) {
  std::mt19937 random(20261127);
  int moves = 0;
  std::vector<int> seen(static_cast<int>(Action::kEndFailed) + 1, 0);
  for (int walk = 0; walk < 2000; ++walk) {
    JobRecord job;
    ClusterView cluster;
    absl::Time now = kT0;
    for (int i = 0; i < 60 && !IsFinal(job.state); ++i) {
      Observe(random, job, cluster, now);
      Decision d = Decide(job, cluster, now, kLimits);
      ++seen[static_cast<int>(d.action)];
      if (d.action == Action::kDecideFailure || d.action == Action::kWorkersNotReturned) {
        FailureFacts f;
        f.state = job.state;
        f.curable = random() % 2;
        f.stopped = random() % 4 == 0;
        f.final_step_sealed = random() % 6 == 0;
        f.max_restarts = 3;
        f.failures_used = static_cast<int>(random() % 4);
        d = DecideAfterFailure(f);
        ++seen[static_cast<int>(d.action)];
      }
      ASSERT_TRUE(d.to == job.state || IsAllowedTransition(job.state, d.to))
          << "walk " << walk << ": " << ActionName(d.action) << " from " << JobState_Name(job.state)
          << " to " << JobState_Name(d.to);
      if (IsFinal(d.to) && random() % 5 == 0) {  // the store refused it: retried next pass
        job.pending_end = true;
        job.pending_end_state = d.to;
        continue;
      }
      if (d.to != job.state) ++moves;
      ApplyToRecord(d, cluster, now, job);
    }
  }
  EXPECT_GT(moves, 2000);
  // Every action came up in the walks.
  for (int a = 0; a < static_cast<int>(seen.size()); ++a) {
    EXPECT_GT(seen[a], 0) << ActionName(static_cast<Action>(a));
  }
}

}  // namespace
}  // namespace dtrain::coordinator
