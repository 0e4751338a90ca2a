#include "coordinator/policy/preemption.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

PreemptionCandidate Running(const std::string& id, int priority, int workers, int started_s) {
  return PreemptionCandidate{id, priority, workers, kT0 + absl::Seconds(started_s)};
}

TEST(Preemption, NoneWhenTheWorkersAreThereAlready) {
  EXPECT_THAT(ChoosePreemptions(10, 2, 2, {Running("a", 0, 2, 0)}), IsEmpty());
}

TEST(Preemption, OnlyJobsOfALowerPriority) {
  EXPECT_THAT(ChoosePreemptions(5, 2, 0, {Running("same", 5, 2, 0), Running("higher", 9, 2, 0)}),
              IsEmpty());
  EXPECT_THAT(ChoosePreemptions(5, 2, 0, {Running("same", 5, 2, 0), Running("lower", 4, 2, 0)}),
              ElementsAre("lower"));
}

TEST(Preemption, NoneWhenAllOfThemWouldNotFreeEnough) {
  EXPECT_THAT(ChoosePreemptions(10, 4, 1, {Running("a", 0, 1, 0), Running("b", 0, 1, 0)}),
              IsEmpty());
}

TEST(Preemption, TheLowestPriorityThenTheRunStartedLast) {
  const std::vector<PreemptionCandidate> running = {
      Running("old", 0, 1, 0), Running("new", 0, 1, 60), Running("low", -5, 1, 0)};
  EXPECT_THAT(ChoosePreemptions(10, 1, 0, running), ElementsAre("low"));
  EXPECT_THAT(ChoosePreemptions(10, 2, 0, running), ElementsAre("low", "new"));
  // Workers already coming free count.
  EXPECT_THAT(ChoosePreemptions(10, 3, 1, running), ElementsAre("low", "new"));
}

TEST(Preemption, AVictimTheOthersMakeUnnecessaryKeepsRunning) {
  // "small" comes first in the order, but "big" alone frees the four workers needed.
  EXPECT_THAT(ChoosePreemptions(10, 4, 0, {Running("small", -1, 1, 0), Running("big", 0, 4, 0)}),
              ElementsAre("big"));
  EXPECT_THAT(ChoosePreemptions(10, 5, 0, {Running("small", -1, 1, 0), Running("big", 0, 4, 0)}),
              UnorderedElementsAre("small", "big"));
}

}  // namespace
}  // namespace dtrain::coordinator
