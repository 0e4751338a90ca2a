#include "coordinator/trace_job.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

FlightEntry Entry(FlightEntry::Op op, int64_t step, FlightEntry::State state = FlightEntry::DONE) {
  FlightEntry e;
  e.set_op(op);
  e.set_state(state);
  e.set_step(step);
  e.set_micro_batch(step >= 0 ? 0 : -1);
  return e;
}

// One step of a stage: F, its send, B, then the gradient all-reduce (a collective: no step).
void AddStep(RankDiagnosis& r, int64_t step, bool finished = true) {
  *r.add_entries() = Entry(FlightEntry::FORWARD, step);
  *r.add_entries() = Entry(FlightEntry::SEND, step);
  *r.add_entries() = Entry(FlightEntry::BACKWARD_INPUT, step);
  *r.add_entries() =
      Entry(FlightEntry::COLLECTIVE, -1, finished ? FlightEntry::DONE : FlightEntry::STARTED);
}

RankState Answered(int rank, int64_t first_step, int64_t last_step, bool last_finished = true) {
  RankState s;
  s.set_rank(rank);
  s.set_worker_id("w" + std::to_string(rank + 1));
  s.set_answered(true);
  RankDiagnosis& r = *s.mutable_recorder();
  for (int64_t step = first_step; step <= last_step; ++step) {
    AddStep(r, step, step < last_step || last_finished);
  }
  r.set_recorded(r.entries_size());
  return s;
}

TEST(CompleteSteps, AStepIsCompleteOnceTheNextOneBegan) {
  // Steps 1-3 ended; 3 has no successor yet: its tail (the all-reduce) may still run.
  EXPECT_THAT(CompleteSteps(Answered(0, 1, 3).recorder()), ElementsAre(1, 2));
}

TEST(CompleteSteps, AStepWithAnOpenOperationIsNotComplete) {
  RankState s = Answered(0, 1, 2);
  AddStep(*s.mutable_recorder(), 3);
  s.mutable_recorder()->mutable_entries(7)->set_state(FlightEntry::STARTED);  // step 2's
  s.mutable_recorder()->set_recorded(s.recorder().entries_size());
  EXPECT_THAT(CompleteSteps(s.recorder()), ElementsAre(1));
}

TEST(CompleteSteps, AWrappedRingsOldestStepIsNotComplete) {
  RankState s = Answered(0, 5, 8);
  s.mutable_recorder()->set_recorded(1000);  // older records were overwritten
  EXPECT_THAT(CompleteSteps(s.recorder()), ElementsAre(6, 7));
}

TEST(CutStep, DefaultsToTheNewestStepCompleteOnEveryRank) {
  JobDiagnosis gathered;
  gathered.set_job_id("job-000001");
  *gathered.add_ranks() = Answered(0, 1, 5);
  *gathered.add_ranks() = Answered(1, 1, 4);  // behind: its step 4 has no successor yet
  absl::StatusOr<JobTrace> trace = CutStep(gathered, std::nullopt);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->step(), 3);
  EXPECT_THAT(trace->available_steps(), ElementsAre(1, 2, 3));
  ASSERT_EQ(trace->ranks_size(), 2);
  for (const RankState& r : trace->ranks()) {
    // The step's F, send, B and the all-reduce after it (no step of its own).
    ASSERT_EQ(r.recorder().entries_size(), 4) << r.rank();
    EXPECT_EQ(r.recorder().entries(0).step(), 3);
    EXPECT_EQ(r.recorder().entries(3).op(), FlightEntry::COLLECTIVE);
  }
}

TEST(CutStep, AStepNotInEveryRecorderNamesTheStepsThatAre) {
  JobDiagnosis gathered;
  gathered.set_job_id("job-000001");
  *gathered.add_ranks() = Answered(0, 40, 53);
  *gathered.add_ranks() = Answered(1, 40, 53);
  absl::StatusOr<JobTrace> trace = CutStep(gathered, 7);
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(trace.status().message(), HasSubstr("step 7 is not complete"));
  EXPECT_THAT(trace.status().message(), HasSubstr("steps 40-52 are"));
  EXPECT_TRUE(CutStep(gathered, 41).ok());
}

TEST(CutStep, ARankThatDidNotAnswerKeepsItsErrorAndNoEntries) {
  JobDiagnosis gathered;
  *gathered.add_ranks() = Answered(0, 1, 3);
  RankState& silent = *gathered.add_ranks();
  silent.set_rank(1);
  silent.set_error("no answer by the deadline");
  absl::StatusOr<JobTrace> trace = CutStep(gathered, std::nullopt);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->step(), 2);
  EXPECT_EQ(trace->ranks(1).error(), "no answer by the deadline");
  EXPECT_EQ(trace->ranks(1).recorder().entries_size(), 0);
}

TEST(CutStep, NoRankAnsweringIsFailedPreconditionWithTheirErrors) {
  JobDiagnosis gathered;
  RankState& silent = *gathered.add_ranks();
  silent.set_rank(0);
  silent.set_worker_id("w1");
  silent.set_error("connection refused");
  absl::StatusOr<JobTrace> trace = CutStep(gathered, std::nullopt);
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(trace.status().message(), HasSubstr("rank 0 (w1): connection refused"));
}

TEST(CutStep, NoCompleteStepYetIsOutOfRange) {
  JobDiagnosis gathered;
  *gathered.add_ranks() = Answered(0, 1, 1);
  EXPECT_EQ(CutStep(gathered, std::nullopt).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(FitsOneMessage, ATraceOverTheLimitSaysHowBigItIs) {
  JobDiagnosis gathered;
  gathered.set_job_id("job-000001");
  *gathered.add_ranks() = Answered(0, 1, 3);
  absl::StatusOr<JobTrace> trace = CutStep(gathered, std::nullopt);
  ASSERT_TRUE(trace.ok()) << trace.status();
  const size_t bytes = trace->ByteSizeLong();
  EXPECT_TRUE(FitsOneMessage(*trace, bytes).ok());
  absl::StatusOr<JobTrace> big = FitsOneMessage(*trace, bytes - 1);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("job-000001: step 2 on 1 ranks is"));
}

}  // namespace
}  // namespace dtrain::coordinator
