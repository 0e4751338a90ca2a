#include "coordinator/worker_registry.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);
const absl::Duration kLease = absl::Seconds(5);

RegisterWorkerRequest Reg(const std::string& id, const std::string& session,
                          const std::string& host = "h1") {
  RegisterWorkerRequest r;
  r.set_worker_id(id);
  r.set_session_id(session);
  r.set_address(id + ":7071");
  r.set_host_label(host);
  return r;
}

HeartbeatRequest Beat(const std::string& id, const std::string& session,
                      const std::string& running = "") {
  HeartbeatRequest r;
  r.set_worker_id(id);
  r.set_session_id(session);
  r.set_running_job_id(running);
  return r;
}

// A one-job placement over `workers`, one rank each.
std::shared_ptr<const JobAssignment> Job(const std::string& job_id,
                                         const std::vector<std::string>& workers) {
  auto job = std::make_shared<JobAssignment>();
  job->set_job_id(job_id);
  job->mutable_spec()->mutable_parallel()->set_pp(static_cast<int>(workers.size()));
  for (size_t i = 0; i < workers.size(); ++i) {
    RankAssignment* rank = job->mutable_placement()->add_ranks();
    rank->set_pp_rank(static_cast<int>(i));
    rank->set_worker_id(workers[i]);
  }
  return job;
}

// What JobManager::Place does once the placement is saved: reserve, then publish.
absl::Status Placed(WorkerRegistry& reg, std::shared_ptr<const JobAssignment> job, absl::Time now) {
  absl::Status status = reg.Assign(job, now);
  if (status.ok()) reg.Publish(*job);
  return status;
}

TEST(WorkerRegistry, RegisterThenHeartbeatKeepsTheWorkerIdle) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  absl::StatusOr<WorkerRegistry::HeartbeatResult> hb = reg.Heartbeat(Beat("w1", "s1"), kT0);
  ASSERT_TRUE(hb.ok());
  EXPECT_FALSE(hb->response.register_again());
  EXPECT_FALSE(hb->response.has_assignment());
  ASSERT_EQ(reg.IdleWorkers().size(), 1u);
  EXPECT_EQ(reg.IdleWorkers()[0].address(), "w1:7071");
  EXPECT_EQ(reg.Counts().idle, 1);
}

TEST(WorkerRegistry, EmptyIdsAreInvalid) {
  WorkerRegistry reg(kLease);
  EXPECT_EQ(reg.Register(Reg("", "s1"), kT0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.Register(Reg("w1", ""), kT0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.Heartbeat(Beat("", "s1"), kT0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkerRegistry, DuplicateIdWithALiveSessionIsAlreadyExists) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  absl::StatusOr<WorkerRegistry::RegisterResult> dup =
      reg.Register(Reg("w1", "s2"), kT0 + absl::Seconds(1));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(dup.status().message(), HasSubstr("\"w1\" is held by another live session"));
  // The same session again is a retry, not a duplicate.
  absl::StatusOr<WorkerRegistry::RegisterResult> again = reg.Register(Reg("w1", "s1"), kT0);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->new_session);
}

TEST(WorkerRegistry, NewSessionMayTakeTheIdOnceTheLeaseRanOut) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  absl::StatusOr<WorkerRegistry::RegisterResult> r =
      reg.Register(Reg("w1", "s2"), kT0 + kLease + absl::Milliseconds(1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->new_session);
  EXPECT_FALSE(r->replaced.has_value());  // it held no job
  // The old session is now unknown.
  EXPECT_TRUE(reg.Heartbeat(Beat("w1", "s1"), kT0 + kLease)->response.register_again());
}

TEST(WorkerRegistry, UnknownSessionIsToldToRegisterAgain) {
  WorkerRegistry reg(kLease);
  EXPECT_TRUE(reg.Heartbeat(Beat("w9", "s1"), kT0)->response.register_again());
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  EXPECT_TRUE(reg.Heartbeat(Beat("w1", "other"), kT0)->response.register_again());
}

TEST(WorkerRegistry, HeartbeatsRenewTheLease) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  for (int i = 1; i <= 20; ++i) {
    ASSERT_FALSE(
        reg.Heartbeat(Beat("w1", "s1"), kT0 + absl::Seconds(i))->response.register_again());
    EXPECT_THAT(reg.Sweep(kT0 + absl::Seconds(i)), IsEmpty());
  }
}

TEST(WorkerRegistry, SilentWorkerIsLostWithItsJob) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(reg.Register(Reg("w2", "s2"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w1"}), kT0).ok());
  EXPECT_THAT(reg.Sweep(kT0 + kLease), IsEmpty());  // exactly the lease: still live
  reg.Heartbeat(Beat("w2", "s2"), kT0 + kLease).IgnoreError();
  std::vector<WorkerFault> faults = reg.Sweep(kT0 + kLease + absl::Milliseconds(1));
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].kind, WorkerFault::kLost);
  EXPECT_EQ(faults[0].worker_id, "w1");
  EXPECT_EQ(faults[0].job_id, "job-000001");
  EXPECT_EQ(faults[0].silent, kLease + absl::Milliseconds(1));
  WorkerCounts counts = reg.Counts();
  EXPECT_EQ(counts.lost, 1);
  EXPECT_EQ(counts.idle, 1);
  EXPECT_EQ(reg.List()[0].state(), LOST);
  EXPECT_THAT(reg.Sweep(kT0 + absl::Seconds(60)), ::testing::SizeIs(1));  // w2 now; w1 once
  // A lost worker comes back with a new registration.
  ASSERT_TRUE(reg.Register(Reg("w1", "s3"), kT0 + absl::Seconds(61)).ok());
  EXPECT_EQ(reg.List()[0].state(), IDLE);
}

TEST(WorkerRegistry, AnAssignmentIsHeldUntilPublished) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(reg.Register(Reg("w2", "s2"), kT0).ok());
  std::shared_ptr<const JobAssignment> job = Job("job-000001", {"w1"});
  ASSERT_TRUE(reg.Assign(job, kT0).ok());
  // Reserved (BUSY, not placeable again) but not delivered, and not a delivery left
  // unacknowledged: no fault however long the save takes, as long as w1 heartbeats.
  EXPECT_EQ(reg.Counts().busy, 1);
  EXPECT_EQ(reg.Assign(Job("job-000002", {"w1"}), kT0).code(),
            absl::StatusCode::kFailedPrecondition);
  for (int i = 0; i <= 2; ++i) {
    const absl::Time t = kT0 + i * kLease;
    EXPECT_FALSE(reg.Heartbeat(Beat("w1", "s1"), t)->response.has_assignment());
    reg.Heartbeat(Beat("w2", "s2"), t).IgnoreError();
    EXPECT_THAT(reg.Sweep(t), IsEmpty());
  }
  reg.Publish(*job);
  absl::StatusOr<WorkerRegistry::HeartbeatResult> hb =
      reg.Heartbeat(Beat("w1", "s1"), kT0 + 2 * kLease);
  ASSERT_TRUE(hb->response.has_assignment());
  EXPECT_EQ(hb->response.assignment().job_id(), "job-000001");
}

TEST(WorkerRegistry, AHeldAssignmentCancelledIsNeverDelivered) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  std::shared_ptr<const JobAssignment> job = Job("job-000001", {"w1"});
  ASSERT_TRUE(reg.Assign(job, kT0).ok());
  const std::vector<std::string> workers = {"w1"};
  reg.CancelJob("job-000001", workers);  // the placement's save failed
  EXPECT_EQ(reg.Counts().idle, 1);       // free at once
  reg.Publish(*job);                     // too late: the worker no longer holds it
  absl::StatusOr<WorkerRegistry::HeartbeatResult> hb = reg.Heartbeat(Beat("w1", "s1"), kT0);
  EXPECT_FALSE(hb->response.has_assignment());
  EXPECT_THAT(hb->response.cancel_job_ids(), IsEmpty());
}

TEST(WorkerRegistry, AssignmentIsDeliveredOnceAndAcknowledged) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(reg.Register(Reg("w2", "s2"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w1", "w2"}), kT0).ok());
  EXPECT_THAT(reg.IdleWorkers(), IsEmpty());

  auto hb = reg.Heartbeat(Beat("w2", "s2"), kT0);
  ASSERT_TRUE(hb->response.has_assignment());
  EXPECT_EQ(hb->response.assignment().job_id(), "job-000001");
  EXPECT_EQ(hb->response.assignment().rank().worker_id(), "w2");
  EXPECT_EQ(hb->response.assignment().rank().pp_rank(), 1);
  EXPECT_EQ(hb->response.assignment().placement().ranks_size(), 2);
  EXPECT_FALSE(reg.Heartbeat(Beat("w2", "s2"), kT0)->response.has_assignment());

  hb = reg.Heartbeat(Beat("w2", "s2", "job-000001"), kT0);
  EXPECT_EQ(hb->acked_job, "job-000001");
  hb = reg.Heartbeat(Beat("w2", "s2", "job-000001"), kT0);
  EXPECT_EQ(hb->acked_job, "");  // only the first time
  EXPECT_EQ(reg.JobOf("w2"), "job-000001");
}

TEST(WorkerRegistry, AssignIsAllOrNothing) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(reg.Register(Reg("w2", "s2"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w2"}), kT0).ok());
  EXPECT_EQ(reg.Assign(Job("job-000002", {"w1", "w2"}), kT0).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reg.JobOf("w1"), "");
  EXPECT_EQ(reg.Assign(Job("job-000003", {"w9"}), kT0).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(WorkerRegistry, CancelIsRepeatedUntilTheWorkerStops) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w1"}), kT0).ok());
  reg.Heartbeat(Beat("w1", "s1"), kT0).IgnoreError();                // delivered
  reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0).IgnoreError();  // running
  const std::string workers[] = {"w1"};
  reg.CancelJob("job-000001", workers);
  auto hb = reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0);
  EXPECT_THAT(hb->response.cancel_job_ids(), ElementsAre("job-000001"));
  EXPECT_EQ(reg.Counts().busy, 1);  // still stopping
  hb = reg.Heartbeat(Beat("w1", "s1"), kT0);
  EXPECT_TRUE(hb->released);
  EXPECT_THAT(hb->response.cancel_job_ids(), IsEmpty());
  EXPECT_EQ(reg.Counts().idle, 1);
}

TEST(WorkerRegistry, CancelBeforeDeliveryFreesTheWorkerAtOnce) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w1"}), kT0).ok());
  const std::string workers[] = {"w1"};
  reg.CancelJob("job-000001", workers);
  EXPECT_EQ(reg.Counts().idle, 1);
  EXPECT_FALSE(reg.Heartbeat(Beat("w1", "s1"), kT0)->response.has_assignment());
}

TEST(WorkerRegistry, AJobTheWorkerShouldNotRunIsCancelled) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  auto hb = reg.Heartbeat(Beat("w1", "s1", "job-000007"), kT0);
  EXPECT_THAT(hb->response.cancel_job_ids(), ElementsAre("job-000007"));
}

// w1 registered, was assigned job-000001, ran it, and its outcome arrived at kT0.
void RunJobUntilItsOutcome(WorkerRegistry& reg) {
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w1"}), kT0).ok());
  reg.Heartbeat(Beat("w1", "s1"), kT0).IgnoreError();
  reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0).IgnoreError();
  reg.Release("w1", "job-000001", kT0);
}

// Its outcome arrived, but the worker may still serve the job's peer service on its address:
// placing another job's rank on it now would have that job's peers refused by the old run.
TEST(WorkerRegistry, AFinishedWorkerIsIdleOnlyOnceItNoLongerNamesTheJob) {
  WorkerRegistry reg(kLease);
  RunJobUntilItsOutcome(reg);
  EXPECT_EQ(reg.Counts().busy, 1);
  EXPECT_THAT(reg.IdleWorkers(), IsEmpty());
  auto hb = reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0 + absl::Milliseconds(10));
  EXPECT_FALSE(hb->released);
  EXPECT_THAT(hb->response.cancel_job_ids(), IsEmpty());  // not cancelled: it is winding down
  // Reports after the outcome are refused; a silence now is not the job's loss.
  EXPECT_EQ(reg.Report("w1", "s1", "job-000001", kT0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reg.Sweep(kT0 + kLease / 2), IsEmpty());
  hb = reg.Heartbeat(Beat("w1", "s1"), kT0 + absl::Milliseconds(20));
  EXPECT_TRUE(hb->released);
  EXPECT_EQ(reg.Counts().idle, 1);
  // It may still name the job once more (a heartbeat in flight): no cancel for it.
  EXPECT_THAT(reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0)->response.cancel_job_ids(),
              IsEmpty());
}

TEST(WorkerRegistry, AFinishedWorkerStillNamingTheJobALeaseLaterIsToldToCancelIt) {
  WorkerRegistry reg(kLease);
  RunJobUntilItsOutcome(reg);
  reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0 + kLease / 2).IgnoreError();
  const absl::Time later = kT0 + kLease + absl::Milliseconds(1);
  EXPECT_THAT(reg.Heartbeat(Beat("w1", "s1", "job-000001"), later)->response.cancel_job_ids(),
              ElementsAre("job-000001"));
  EXPECT_TRUE(reg.Heartbeat(Beat("w1", "s1"), later)->released);
}

TEST(WorkerRegistry, AWorkerLostAfterItsOutcomeOwesTheJobNothing) {
  WorkerRegistry reg(kLease);
  RunJobUntilItsOutcome(reg);
  std::vector<WorkerFault> faults = reg.Sweep(kT0 + 2 * kLease);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].kind, WorkerFault::kLost);
  EXPECT_EQ(faults[0].job_id, "");
}

TEST(WorkerRegistry, ReAttachesAWorkerThatRegistersWithItsJob) {
  WorkerRegistry reg(kLease);
  RegisterWorkerRequest r = Reg("w1", "s1");
  r.set_running_job_id("job-000003");
  ASSERT_TRUE(reg.Register(r, kT0, "job-000003").ok());
  EXPECT_EQ(reg.JobOf("w1"), "job-000003");
  // Already acknowledged: reporting the job is not a new acknowledgement, and nothing is
  // cancelled.
  auto hb = reg.Heartbeat(Beat("w1", "s1", "job-000003"), kT0);
  EXPECT_EQ(hb->acked_job, "");
  EXPECT_THAT(hb->response.cancel_job_ids(), IsEmpty());
}

TEST(WorkerRegistry, ReportAcknowledgesAndChecksTheJob) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w1"}), kT0).ok());
  reg.Heartbeat(Beat("w1", "s1"), kT0).IgnoreError();  // delivered
  EXPECT_EQ(*reg.Report("w1", "s1", "job-000001", kT0), true);
  EXPECT_EQ(*reg.Report("w1", "s1", "job-000001", kT0), false);
  EXPECT_EQ(reg.Report("w1", "s1", "job-000002", kT0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reg.Report("w1", "bad", "job-000001", kT0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(WorkerRegistry, AnEarlierRunOfAJobPlacedAgainIsStoppedBeforeTheNewAssignment) {
  // A recovery placed job-000001 on w1 again while w1 still runs (or reports) its earlier run.
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w1"}), kT0).ok());
  EXPECT_EQ(reg.Report("w1", "s1", "job-000001", kT0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto hb = reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0);
  EXPECT_THAT(hb->response.cancel_job_ids(), ElementsAre("job-000001"));
  EXPECT_FALSE(hb->response.has_assignment());
  EXPECT_EQ(hb->acked_job, "");
  hb = reg.Heartbeat(Beat("w1", "s1"), kT0);  // the earlier run is gone
  EXPECT_EQ(hb->response.assignment().job_id(), "job-000001");
  EXPECT_EQ(reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0)->acked_job, "job-000001");
}

// w1 was paused past its lease while running job-000001 (which went on elsewhere), came back
// with a new session still running it, and was placed in job-000002 at once: job-000002's
// assignment waits until w1 has stopped job-000001, which it would otherwise refuse for.
TEST(WorkerRegistry, AnAssignmentWaitsUntilTheWorkerHasStoppedAnotherJob) {
  WorkerRegistry reg(kLease);
  RegisterWorkerRequest back = Reg("w1", "s2");
  back.set_running_job_id("job-000001");
  back.set_running_step(377);
  ASSERT_TRUE(reg.Register(back, kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000002", {"w1"}), kT0).ok());
  auto hb = reg.Heartbeat(Beat("w1", "s2", "job-000001"), kT0);
  EXPECT_THAT(hb->response.cancel_job_ids(), ElementsAre("job-000001"));
  EXPECT_FALSE(hb->response.has_assignment());
  hb = reg.Heartbeat(Beat("w1", "s2", "job-000001"), kT0 + absl::Seconds(1));  // still stopping
  EXPECT_THAT(hb->response.cancel_job_ids(), ElementsAre("job-000001"));
  EXPECT_FALSE(hb->response.has_assignment());
  hb = reg.Heartbeat(Beat("w1", "s2"), kT0 + absl::Seconds(2));  // stopped
  EXPECT_TRUE(hb->response.cancel_job_ids().empty());
  EXPECT_EQ(hb->response.assignment().job_id(), "job-000002");
  EXPECT_EQ(reg.Heartbeat(Beat("w1", "s2", "job-000002"), kT0 + absl::Seconds(3))->acked_job,
            "job-000002");
}

// The same, but w1 never stops job-000001 (a run stuck where a cancel cannot reach it): a lease
// after the assignment was first withheld, it is a fault of job-000002 (not accepted), as for an
// assignment delivered and never acknowledged, and job-000002 is never delivered to it.
TEST(WorkerRegistry, AWorkerThatDoesNotStopAnotherJobWithinALeaseIsAFault) {
  WorkerRegistry reg(kLease);
  RegisterWorkerRequest back = Reg("w1", "s2");
  back.set_running_job_id("job-000001");
  ASSERT_TRUE(reg.Register(back, kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000002", {"w1"}), kT0).ok());
  for (int s = 0; s <= 5; ++s) {
    auto hb = reg.Heartbeat(Beat("w1", "s2", "job-000001"), kT0 + absl::Seconds(s));
    EXPECT_FALSE(hb->response.has_assignment());
    EXPECT_THAT(hb->response.cancel_job_ids(), ElementsAre("job-000001"));
  }
  EXPECT_THAT(reg.Sweep(kT0 + absl::Seconds(5)), IsEmpty());  // a lease (5 s) not yet over
  std::vector<WorkerFault> faults = reg.Sweep(kT0 + absl::Seconds(5) + absl::Milliseconds(1));
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].kind, WorkerFault::kNotAccepted);
  EXPECT_EQ(faults[0].job_id, "job-000002");
  // It is no longer job-000002's; once it stops job-000001 it is idle, and gets nothing.
  auto hb = reg.Heartbeat(Beat("w1", "s2"), kT0 + absl::Seconds(6));
  EXPECT_FALSE(hb->response.has_assignment());
  EXPECT_EQ(reg.List()[0].state(), IDLE);
}

TEST(WorkerRegistry, StuckAssignmentsAreFaults) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(reg.Register(Reg("w2", "s2"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w1"}), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000002", {"w2"}), kT0).ok());
  // w1 takes its assignment but never reports running it.
  reg.Heartbeat(Beat("w1", "s1"), kT0).IgnoreError();
  // w2 runs its job, then drops it without an outcome.
  reg.Heartbeat(Beat("w2", "s2"), kT0).IgnoreError();
  reg.Heartbeat(Beat("w2", "s2", "job-000002"), kT0).IgnoreError();
  reg.Heartbeat(Beat("w2", "s2"), kT0 + absl::Seconds(1)).IgnoreError();
  reg.Heartbeat(Beat("w1", "s1"), kT0 + absl::Seconds(4)).IgnoreError();
  reg.Heartbeat(Beat("w2", "s2"), kT0 + absl::Seconds(4)).IgnoreError();
  EXPECT_THAT(reg.Sweep(kT0 + absl::Seconds(4)), IsEmpty());
  const absl::Time later = kT0 + absl::Seconds(7);
  reg.Heartbeat(Beat("w1", "s1"), later).IgnoreError();
  reg.Heartbeat(Beat("w2", "s2"), later).IgnoreError();
  std::vector<WorkerFault> faults = reg.Sweep(later);
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_EQ(faults[0].kind, WorkerFault::kNotAccepted);
  EXPECT_EQ(faults[0].job_id, "job-000001");
  EXPECT_EQ(faults[1].kind, WorkerFault::kDropped);
  EXPECT_EQ(faults[1].job_id, "job-000002");
}

}  // namespace
}  // namespace dtrain::coordinator

namespace dtrain::coordinator {
namespace {

// The coordinator's own process stopped for three leases (SIGSTOP): the first call after it
// gives every worker a lease from now, so the sweep that follows declares nobody lost.
TEST(WorkerRegistryPause, APauseOfTheCoordinatorGivesEveryWorkerALeaseOfGrace) {
  absl::Duration mono = absl::Seconds(1);
  WorkerRegistry reg(
      kLease, [&] { return mono; }, absl::Seconds(1));
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(reg.Register(Reg("w2", "s2"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w1", "w2"}), kT0).ok());
  ASSERT_TRUE(reg.Heartbeat(Beat("w1", "s1"), kT0).ok());                // delivered
  ASSERT_TRUE(reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0).ok());  // acknowledged
  ASSERT_TRUE(reg.Heartbeat(Beat("w2", "s2"), kT0).ok());
  ASSERT_TRUE(reg.Heartbeat(Beat("w2", "s2", "job-000001"), kT0).ok());

  const absl::Time after = kT0 + 3 * kLease;
  mono += 3 * kLease;
  EXPECT_THAT(reg.Sweep(after), IsEmpty());
  EXPECT_EQ(reg.TakePause(), 3 * kLease);
  EXPECT_FALSE(reg.TakePause().has_value());  // once
  EXPECT_EQ(reg.JobOf("w1"), "job-000001");
  // Their heartbeats are heard as those of live sessions (no register_again).
  absl::StatusOr<WorkerRegistry::HeartbeatResult> hb =
      reg.Heartbeat(Beat("w1", "s1", "job-000001"), after + absl::Seconds(1));
  ASSERT_TRUE(hb.ok());
  EXPECT_FALSE(hb->response.register_again());
  // The grace is a lease: a worker that stays silent is lost after it.
  mono += kLease + absl::Milliseconds(500);  // (observed by this sweep: a pause again...)
  std::vector<WorkerFault> faults = reg.Sweep(after + kLease + absl::Milliseconds(500));
  EXPECT_THAT(faults, IsEmpty());
  mono += absl::Milliseconds(100);  // ... so the next sweep, a tick later, judges
  faults = reg.Sweep(after + 2 * kLease + absl::Seconds(1));
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_EQ(faults[0].kind, WorkerFault::kLost);
}

TEST(WorkerRegistryPause, WithoutAPauseALeaseRunsOutAsBefore) {
  absl::Duration mono = absl::Seconds(1);
  WorkerRegistry reg(
      kLease, [&] { return mono; }, absl::Seconds(1));
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  for (int i = 1; i <= 30; ++i) {  // the scheduler ticks on; the worker is silent
    mono += absl::Milliseconds(200);
    std::vector<WorkerFault> faults = reg.Sweep(kT0 + i * absl::Milliseconds(200));
    if (i * absl::Milliseconds(200) <= kLease) {
      EXPECT_THAT(faults, IsEmpty()) << i;
    } else {
      ASSERT_EQ(faults.size(), 1u) << i;
      EXPECT_EQ(faults[0].worker_id, "w1");
      break;
    }
  }
  EXPECT_FALSE(reg.TakePause().has_value());
}

TEST(WorkerRegistry, RunningStepIsWhatTheWorkerLastSaidOfThatJob) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  EXPECT_EQ(reg.RunningStep("w1", "job-000001"), -1);
  HeartbeatRequest beat = Beat("w1", "s1", "job-000001");
  beat.set_running_step(11);
  ASSERT_TRUE(reg.Heartbeat(beat, kT0).ok());
  EXPECT_EQ(reg.RunningStep("w1", "job-000001"), 11);
  EXPECT_EQ(reg.RunningStep("w1", "job-000002"), -1);
}

// kill -9 and an immediate restart: the new process took the dead one's lock and names its
// session, so it is accepted at once; the old session's job is reported lost.
TEST(WorkerRegistry, ANewSessionNamingTheLiveOneAsItsDeadPredecessorReplacesIt) {
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w1"}), kT0).ok());
  ASSERT_TRUE(reg.Heartbeat(Beat("w1", "s1"), kT0).ok());
  ASSERT_TRUE(reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0).ok());
  // Without the proof: refused while the lease lasts.
  EXPECT_EQ(reg.Register(Reg("w1", "s2"), kT0 + absl::Seconds(1)).status().code(),
            absl::StatusCode::kAlreadyExists);
  RegisterWorkerRequest restarted = Reg("w1", "s2");
  restarted.set_previous_session_id("s3");  // some other dead session: no proof about s1
  EXPECT_EQ(reg.Register(restarted, kT0 + absl::Seconds(1)).status().code(),
            absl::StatusCode::kAlreadyExists);
  restarted.set_previous_session_id("s1");
  absl::StatusOr<WorkerRegistry::RegisterResult> r =
      reg.Register(restarted, kT0 + absl::Seconds(1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->new_session);
  ASSERT_TRUE(r->replaced.has_value());
  EXPECT_EQ(r->replaced->job_id, "job-000001");
  EXPECT_EQ(r->replaced->silent, absl::Seconds(1));
  EXPECT_EQ(reg.JobOf("w1"), "");
  // The old session is gone: its heartbeat is told to register again.
  absl::StatusOr<WorkerRegistry::HeartbeatResult> old =
      reg.Heartbeat(Beat("w1", "s1", "job-000001"), kT0 + absl::Seconds(2));
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->response.register_again());
}

constexpr int64_t kGiB = int64_t{1} << 30;

// A one-rank job on `worker` whose rank needs `bytes`.
std::shared_ptr<const JobAssignment> OneRank(const std::string& job_id, const std::string& worker,
                                             int64_t bytes) {
  auto job = std::make_shared<JobAssignment>();
  job->set_job_id(job_id);
  RankAssignment* rank = job->mutable_placement()->add_ranks();
  rank->set_worker_id(worker);
  rank->set_memory_bytes(bytes);
  return job;
}

RegisterWorkerRequest CpuOnHost(const std::string& id, const std::string& host_id,
                                int64_t host_bytes, int64_t offered) {
  RegisterWorkerRequest r = Reg(id, id + "-s");
  r.mutable_device()->set_kind("cpu");
  r.mutable_device()->set_memory_bytes(offered);
  r.set_host_id(host_id);
  r.set_host_memory_bytes(host_bytes);
  return r;
}

TEST(MemoryShare, EqualPartsOfTheHostCappedByTheOffer) {
  const HostShare host{/*host_bytes=*/20 * kGiB, /*live=*/5, /*idle=*/5, /*reserved=*/0};
  EXPECT_EQ(MemoryShare(20 * kGiB, host, /*idle=*/true), 4 * kGiB);
  EXPECT_EQ(MemoryShare(3 * kGiB, host, /*idle=*/true), 3 * kGiB);         // its cgroup
  EXPECT_EQ(MemoryShare(0, host, /*idle=*/true), 4 * kGiB);                // no offer: the share
  EXPECT_EQ(MemoryShare(7 * kGiB, HostShare{}, /*idle=*/true), 7 * kGiB);  // no host facts
}

TEST(MemoryShare, IdleWorkersShareWhatRunningJobsLeave) {
  // One busy worker holds a 10 GiB rank (placed when it was alone); 4 idle ones share the 10
  // GiB left, not 20 / 5 each: together never more than the host.
  const HostShare host{20 * kGiB, 5, 4, 10 * kGiB};
  EXPECT_EQ(MemoryShare(20 * kGiB, host, /*idle=*/true), 10 * kGiB / 4);
  EXPECT_EQ(MemoryShare(20 * kGiB, host, /*idle=*/false), 4 * kGiB);
  const HostShare overfull{20 * kGiB, 2, 1, 25 * kGiB};
  EXPECT_EQ(MemoryShare(20 * kGiB, overfull, /*idle=*/true), 0);
}

TEST(WorkerRegistry, CpuWorkersOfOneHostOfferNoMoreThanTheHostTogether) {
  WorkerRegistry reg(kLease);
  for (const char* id : {"a", "b", "c", "d", "e"}) {
    ASSERT_TRUE(reg.Register(CpuOnHost(id, "host-1", 23 * kGiB, 23 * kGiB), kT0).ok());
  }
  ASSERT_TRUE(reg.Register(CpuOnHost("x", "host-2", 8 * kGiB, 3 * kGiB), kT0).ok());
  int64_t host1 = 0;
  for (const WorkerInfo& w : reg.IdleWorkers()) {
    if (w.host_id() == "host-1") {
      host1 += w.device().memory_bytes();
      EXPECT_EQ(w.offered_memory_bytes(), 23 * kGiB);
    } else {
      EXPECT_EQ(w.device().memory_bytes(), 3 * kGiB);  // alone, below its host
    }
  }
  EXPECT_LE(host1, 23 * kGiB);
  EXPECT_GE(host1, 23 * kGiB - 5);

  // A rank of 10 GiB on "a": the other four share the 13 GiB left.
  ASSERT_TRUE(Placed(reg, OneRank("job-1", "a", 10 * kGiB), kT0).ok());
  int64_t idle = 0;
  for (const WorkerInfo& w : reg.IdleWorkers()) {
    if (w.host_id() == "host-1") idle += w.device().memory_bytes();
  }
  EXPECT_LE(10 * kGiB + idle, 23 * kGiB);
  // Freed: the equal shares again.
  reg.CancelJob("job-1", {"a"});
  for (const WorkerInfo& w : reg.IdleWorkers()) {
    if (w.host_id() == "host-1") {
      EXPECT_EQ(w.device().memory_bytes(), 23 * kGiB / 5);
    }
  }
}

TEST(WorkerRegistry, TheHeartbeatIntervalAndTheLeaseGrowWithTheCluster) {
  WorkerRegistry reg(kLease);
  // At most 2 heartbeats a second: 1 s for two workers, 2 s for four.
  reg.SetPacing({absl::Seconds(1), absl::Seconds(10)}, 2);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(reg.Register(Reg("w2", "s2"), kT0).ok());
  reg.Sweep(kT0);
  EXPECT_EQ(reg.pace().interval, absl::Seconds(1));
  EXPECT_EQ(reg.Heartbeat(Beat("w1", "s1"), kT0)->response.heartbeat_interval_ms(), 1000);
  ASSERT_TRUE(reg.Register(Reg("w3", "s3"), kT0).ok());
  ASSERT_TRUE(reg.Register(Reg("w4", "s4"), kT0).ok());
  reg.Sweep(kT0);
  EXPECT_EQ(reg.pace().interval, absl::Seconds(2));
  EXPECT_EQ(reg.pace().lease, absl::Seconds(20));
  // Told the new interval, and judged by the new lease from this heartbeat on.
  EXPECT_EQ(reg.Heartbeat(Beat("w1", "s1"), kT0)->response.heartbeat_interval_ms(), 2000);
  for (const char* w : {"w2", "w3", "w4"}) {
    ASSERT_FALSE(reg.Heartbeat(Beat(w, absl::StrCat("s", w + 1)), kT0)->response.register_again());
  }
  EXPECT_THAT(reg.Sweep(kT0 + absl::Seconds(15)), IsEmpty());
  EXPECT_THAT(reg.Sweep(kT0 + absl::Seconds(21)), ::testing::SizeIs(4));
}

TEST(WorkerRegistry, IdleCandidatesAreTheIdleWorkersSharedNotCopied) {
  WorkerRegistry reg(kLease);
  for (const char* id : {"a", "b", "c", "d", "e"}) {
    ASSERT_TRUE(reg.Register(CpuOnHost(id, "host-1", 23 * kGiB, 23 * kGiB), kT0).ok());
  }
  RegisterWorkerRequest x = CpuOnHost("x", "host-2", 8 * kGiB, 3 * kGiB);
  x.set_host_label("h2");
  ASSERT_TRUE(reg.Register(x, kT0).ok());
  ASSERT_TRUE(Placed(reg, OneRank("job-1", "a", 10 * kGiB), kT0).ok());
  ASSERT_TRUE(reg.SetDraining("b", true).ok());
  // The same workers and memory as IdleWorkers (busy "a" and drained "b" left out).
  std::map<std::string, int64_t> listed, candidates;
  for (const WorkerInfo& w : reg.IdleWorkers()) listed[w.worker_id()] = w.device().memory_bytes();
  const std::vector<plan::Candidate> idle = reg.IdleCandidates();
  std::map<std::string, uint32_t> host_of;
  for (const plan::Candidate& c : idle) {
    candidates[c.worker->worker_id()] = c.memory_bytes;
    host_of[c.worker->worker_id()] = c.host;
  }
  EXPECT_EQ(candidates, listed);
  EXPECT_EQ(candidates.size(), 4u);
  EXPECT_EQ(host_of["c"], host_of["e"]);
  EXPECT_NE(host_of["c"], host_of["x"]);
  // Shared: a second call hands out the same registrations; a new registration a new one.
  std::map<std::string, const WorkerInfo*> first;
  for (const plan::Candidate& c : idle) first[c.worker->worker_id()] = c.worker.get();
  for (const plan::Candidate& c : reg.IdleCandidates()) {
    EXPECT_EQ(c.worker.get(), first[c.worker->worker_id()]) << c.worker->worker_id();
  }
  x.set_address("x:7072");
  ASSERT_TRUE(reg.Register(x, kT0).ok());  // the same session again, at a new address
  for (const plan::Candidate& c : reg.IdleCandidates()) {
    if (c.worker->worker_id() == "x") {
      EXPECT_EQ(c.worker->address(), "x:7072");
    }
  }
  EXPECT_EQ(first["x"]->address(), "x:7071");  // what the earlier pass read stays as it was
}

TEST(WorkerRegistry, SweepsBetweenLeasesFindEachEndOnTime) {
  // Sweeps every 100 ms (the scheduler's tick) while w2 heartbeats: each fault comes at the
  // first sweep after its lease or wait ran out, not before, although most sweeps scan nothing.
  WorkerRegistry reg(kLease);
  ASSERT_TRUE(reg.Register(Reg("w1", "s1"), kT0).ok());
  ASSERT_TRUE(reg.Register(Reg("w2", "s2"), kT0).ok());
  ASSERT_TRUE(reg.Register(Reg("w3", "s3"), kT0).ok());
  ASSERT_TRUE(Placed(reg, Job("job-000001", {"w3"}), kT0).ok());
  // w3 takes its assignment 1 s in, never acknowledges it, and keeps heartbeating.
  std::vector<std::pair<absl::Duration, WorkerFault>> seen;
  for (absl::Duration t = absl::ZeroDuration(); t <= absl::Seconds(8);
       t += absl::Milliseconds(100)) {
    reg.Heartbeat(Beat("w2", "s2"), kT0 + t).IgnoreError();
    if (t >= absl::Seconds(1)) reg.Heartbeat(Beat("w3", "s3"), kT0 + t).IgnoreError();
    for (const WorkerFault& f : reg.Sweep(kT0 + t)) seen.push_back({t, f});
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].first, kLease + absl::Milliseconds(100));  // w1 silent since kT0
  EXPECT_EQ(seen[0].second.worker_id, "w1");
  EXPECT_EQ(seen[0].second.kind, WorkerFault::kLost);
  EXPECT_EQ(seen[1].first, absl::Seconds(1) + kLease + absl::Milliseconds(100));
  EXPECT_EQ(seen[1].second.worker_id, "w3");
  EXPECT_EQ(seen[1].second.kind, WorkerFault::kNotAccepted);
  EXPECT_EQ(reg.Counts().lost, 1);
  EXPECT_EQ(reg.JobOf("w2"), "");
}

TEST(WorkerRegistry, CountWithRoomCountsLiveAcceptedWorkersWithEnoughMemory) {
  WorkerRegistry reg(kLease);
  const int64_t kGiB = int64_t{1} << 30;
  for (const auto& [id, bytes] : std::vector<std::pair<std::string, int64_t>>{
           {"small", 4 * kGiB}, {"large", 8 * kGiB}, {"unsaid", 0}, {"gpu", 80 * kGiB}}) {
    RegisterWorkerRequest r = Reg(id, "s-" + id);
    r.mutable_device()->set_memory_bytes(bytes);
    if (id == "gpu") r.mutable_device()->set_kind("cuda");
    ASSERT_TRUE(reg.Register(r, kT0).ok());
  }
  auto cpu = [](const WorkerInfo& w) { return w.device().kind() != "cuda"; };
  EXPECT_EQ(reg.CountWithRoom(6 * kGiB, cpu), 2);  // large, and unsaid (taken to fit)
  EXPECT_EQ(reg.CountWithRoom(kGiB, cpu), 3);
  EXPECT_EQ(reg.CountWithRoom(6 * kGiB, [](const WorkerInfo&) { return true; }), 3);
  reg.Sweep(kT0 + 2 * kLease);  // all lost
  EXPECT_EQ(reg.CountWithRoom(kGiB, cpu), 0);
}

// ReportProgressRequest.report_seq: per worker, for its newest session only; 0 never recorded;
// forgetting the worker forgets its numbers.
TEST(WorkerRegistry, RecordedReportNumbersArePerSession) {
  WorkerRegistry reg(kLease);
  EXPECT_FALSE(reg.ReportRecorded("w1", "s1", 1));
  reg.NoteReportRecorded("w1", "s1", 5);
  EXPECT_TRUE(reg.ReportRecorded("w1", "s1", 5));
  EXPECT_TRUE(reg.ReportRecorded("w1", "s1", 2));
  EXPECT_FALSE(reg.ReportRecorded("w1", "s1", 6));
  EXPECT_FALSE(reg.ReportRecorded("w1", "s1", 0));
  EXPECT_FALSE(reg.ReportRecorded("w2", "s1", 5));
  reg.NoteReportRecorded("w1", "s1", 3);  // never lowers
  EXPECT_TRUE(reg.ReportRecorded("w1", "s1", 5));
  // A new process of w1 numbers from 1 again; its old session's numbers are gone.
  reg.NoteReportRecorded("w1", "s2", 1);
  EXPECT_TRUE(reg.ReportRecorded("w1", "s2", 1));
  EXPECT_FALSE(reg.ReportRecorded("w1", "s2", 2));
  EXPECT_FALSE(reg.ReportRecorded("w1", "s1", 5));
}

}  // namespace
}  // namespace dtrain::coordinator
