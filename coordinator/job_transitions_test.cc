#include "coordinator/job_transitions.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/job_store.h"
#include "coordinator/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::HasSubstr;

const std::vector<JobState> kStates = {
    JOB_STATE_UNSPECIFIED, QUEUED, PLACING, RUNNING, SUCCEEDED, FAILED, CANCELLED, RECOVERING};

// Every edge of the lifecycle the README and the coordinator's log describe; nothing else.
const std::vector<std::pair<JobState, JobState>> kEdges = {
    {QUEUED, QUEUED},          // its wait restated (idle workers changed)
    {QUEUED, PLACING},         // placed
    {QUEUED, FAILED},          // cannot be placed (plan rejects the stored spec)
    {QUEUED, CANCELLED},       //
    {PLACING, RUNNING},        // every worker acknowledged
    {PLACING, RECOVERING},     // a worker lost before it started
    {PLACING, SUCCEEDED},      // a short run's ranks all reported before the last ack
    {PLACING, FAILED},         //
    {PLACING, CANCELLED},      //
    {RUNNING, RECOVERING},     // a rank failed, a worker was drained, stopped or lost
    {RUNNING, SUCCEEDED},      //
    {RUNNING, FAILED},         //
    {RUNNING, CANCELLED},      //
    {RECOVERING, RECOVERING},  // its wait restated
    {RECOVERING, PLACING},     // placed again
    {RECOVERING, SUCCEEDED},   // done is done: the last step was already sealed
    {RECOVERING, FAILED},      // no workers within fault_tolerance.wait_for, or max_restarts
    {RECOVERING, CANCELLED},   //
};

bool InTable(JobState from, JobState to) {
  for (const auto& [a, b] : kEdges) {
    if (a == from && b == to) return true;
  }
  return false;
}

TEST(JobTransitions, TheTableIsExactlyTheLifecycle) {
  for (JobState from : kStates) {
    for (JobState to : kStates) {
      EXPECT_EQ(IsAllowedTransition(from, to), InTable(from, to))
          << JobState_Name(from) << " -> " << JobState_Name(to);
    }
  }
}

TEST(JobTransitions, FinalStatesEndEverythingAndRefusalsNameBothStates) {
  for (JobState final_state : {SUCCEEDED, FAILED, CANCELLED}) {
    EXPECT_TRUE(IsFinal(final_state));
    const absl::Status s = CheckTransition(final_state, RUNNING);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("already ended " + JobState_Name(final_state)));
  }
  const absl::Status s = CheckTransition(QUEUED, RUNNING);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("from QUEUED to RUNNING"));
  EXPECT_TRUE(CheckTransition(RECOVERING, SUCCEEDED).ok());
}

// The property, through the one place that saves a state: whatever sequence of moves is asked
// for, the store keeps exactly the allowed ones, a refused move changes nothing, and every
// consecutive pair of a job's recorded history is an edge of the table.
TEST(JobTransitions, NoSequenceOfMovesStoresAnEdgeOutsideTheTable) {
  auto store = JobStore::Open(TempDb("transitions"));
  ASSERT_TRUE(store.ok()) << store.status();
  JobSpec spec;
  spec.set_name("walk");
  spec.set_dataset("/d.bin");
  spec.set_steps(10);
  std::mt19937 random(20261127);
  int allowed = 0;
  int refused = 0;
  for (int j = 0; j < 40; ++j) {
    absl::StatusOr<Job> job = (*store)->CreateJob(spec, "queued", 1);
    ASSERT_TRUE(job.ok()) << job.status();
    JobState state = QUEUED;
    for (int move = 0; move < 30; ++move) {
      // Mostly the non-final states, so that walks are long; each final state now and then.
      const JobState to = kStates[1 + random() % (kStates.size() - 1)];
      if (IsFinal(to) && random() % 4 != 0) continue;
      const absl::Status s = (*store)->UpdateState(job->id(), to, "walk", 2 + move);
      ASSERT_EQ(s.ok(), IsAllowedTransition(state, to))
          << JobState_Name(state) << " -> " << JobState_Name(to) << ": " << s;
      if (s.ok()) {
        state = to;
        ++allowed;
      } else {
        ++refused;
      }
      absl::StatusOr<Job> now = (*store)->GetJob(job->id(), /*with_history=*/false);
      ASSERT_TRUE(now.ok());
      ASSERT_EQ(now->state(), state);
    }
    absl::StatusOr<Job> done = (*store)->GetJob(job->id());
    ASSERT_TRUE(done.ok());
    for (int i = 1; i < done->history_size(); ++i) {
      EXPECT_TRUE(InTable(done->history(i - 1).state(), done->history(i).state()))
          << job->id() << ": " << JobState_Name(done->history(i - 1).state()) << " -> "
          << JobState_Name(done->history(i).state());
    }
  }
  // The walk exercised both sides of the table.
  EXPECT_GT(allowed, 100);
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace dtrain::coordinator
