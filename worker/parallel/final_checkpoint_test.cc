#include "worker/parallel/final_checkpoint.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::parallel {
namespace {

using ::testing::HasSubstr;

FinalCheckpointRetry Fast() {
  FinalCheckpointRetry r;
  r.wait = absl::Seconds(5);
  r.first_delay = absl::Milliseconds(1);
  r.max_delay = absl::Milliseconds(4);
  r.log_every = absl::Minutes(5);
  return r;
}

// One rank alone: agree() returns its own value.
struct OneRank {
  int writes = 0;
  int fits_at = 3;  // the write that seals
  std::vector<std::string> log;
  FinalCheckpointHooks Hooks() {
    FinalCheckpointHooks h;
    h.agree = [](float v) -> absl::StatusOr<float> { return v; };
    h.peers_ok = [] { return absl::OkStatus(); };
    h.write_again = [this]() -> absl::StatusOr<std::string> {
      return ++writes >= fits_at ? "" : "dir has 10 bytes free, the step needs 20";
    };
    h.warning = [this](const std::string& line) { log.push_back(line); };
    h.note = h.warning;
    return h;
  }
};

TEST(FinalCheckpoint, ASealedStepEndsAtOnceWithoutWriting) {
  OneRank rank;
  std::string skipped;
  ASSERT_TRUE(AwaitFinalCheckpoint(Fast(), rank.Hooks(), true,
                                   "the checkpoint of step 8, the last,", "/c/job-1", &skipped)
                  .ok());
  EXPECT_EQ(rank.writes, 0);
  EXPECT_TRUE(rank.log.empty());
}

TEST(FinalCheckpoint, ASkippedStepIsWrittenAgainUntilItFits) {
  OneRank rank;
  std::string skipped = "dir has 10 bytes free, the step needs 20";
  std::vector<bool> waits;
  FinalCheckpointHooks hooks = rank.Hooks();
  hooks.waiting = [&](bool on) { waits.push_back(on); };
  ASSERT_TRUE(AwaitFinalCheckpoint(Fast(), hooks, true, "the checkpoint of step 8, the last,",
                                   "/c/job-1", &skipped)
                  .ok());
  EXPECT_EQ(skipped, "");
  EXPECT_EQ(rank.writes, 3);
  EXPECT_EQ(waits, std::vector<bool>({true, false, true, false, true, false}));
  ASSERT_EQ(rank.log.size(), 2u);  // the first try, and the seal (logged every 5 minutes)
  EXPECT_THAT(rank.log[0], HasSubstr("the checkpoint of step 8, the last, does not fit (dir has "
                                     "10 bytes free, the step needs 20): every rank keeps its "
                                     "state and writes it again until it fits"));
  EXPECT_THAT(rank.log[0], HasSubstr("free space in /c/job-1 or cancel the job"));
  EXPECT_THAT(rank.log[1], HasSubstr("the checkpoint of step 8, the last, was written after"));
}

TEST(FinalCheckpoint, RankZeroReportsTheWaitOnceAndItsEnd) {
  OneRank rank;
  std::string skipped = "dir has 10 bytes free, the step needs 20";
  std::vector<SpaceWait> reports;
  FinalCheckpointHooks hooks = rank.Hooks();
  hooks.space_wait = [&](const SpaceWait& w) { reports.push_back(w); };
  const absl::Time before = absl::Now();
  ASSERT_TRUE(AwaitFinalCheckpoint(Fast(), hooks, true, "the checkpoint of step 8, the last,",
                                   "/c/job-1", &skipped)
                  .ok());
  ASSERT_EQ(reports.size(), 2u);  // three tries, one reason: once, then its end
  EXPECT_EQ(reports[0].dir, "/c/job-1");
  EXPECT_EQ(reports[0].why, "dir has 10 bytes free, the step needs 20");
  EXPECT_FALSE(reports[0].ended);
  EXPECT_GE(reports[0].until, before + absl::Seconds(5));
  EXPECT_TRUE(reports[1].ended);
  // With every log line (each try here), the report is sent again: a coordinator that
  // restarted during the wait learns of it.
  reports.clear();
  rank.writes = 0;
  skipped = "dir has 10 bytes free, the step needs 20";
  FinalCheckpointRetry chatty = Fast();
  chatty.log_every = absl::ZeroDuration();
  ASSERT_TRUE(AwaitFinalCheckpoint(chatty, hooks, true, "x", "/c/job-1", &skipped).ok());
  EXPECT_EQ(reports.size(), 4u);  // three tries, then the end
  // A step that sealed at once, and a rank other than 0, report nothing.
  reports.clear();
  skipped.clear();
  ASSERT_TRUE(AwaitFinalCheckpoint(Fast(), hooks, true, "x", "/c/job-1", &skipped).ok());
  EXPECT_TRUE(reports.empty());
}

TEST(FinalCheckpoint, AFileWrittenAloneWaitsUntilItFitsOrTheJobStops) {
  int writes = 0;
  auto write = [&]() -> absl::StatusOr<std::string> {
    return ++writes >= 3 ? "" : "No space left on device";
  };
  std::vector<std::string> log;
  std::vector<SpaceWait> reports;
  FinalCheckpointHooks hooks;
  hooks.warning = [&](const std::string& line) { log.push_back(line); };
  hooks.space_wait = [&](const SpaceWait& w) { reports.push_back(w); };
  ASSERT_TRUE(WriteWaitingForSpace(Fast(), hooks, "/c/job-1/model.safetensors",
                                   "the weights file of step 8", write, [] { return false; })
                  .ok());
  EXPECT_EQ(writes, 3);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0], HasSubstr("the weights file of step 8 does not fit (No space left on "
                                "device): it is written again until it fits"));
  EXPECT_THAT(log[0], HasSubstr("free space in /c/job-1 or cancel the job"));
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_TRUE(reports[0].weights_file);
  EXPECT_EQ(reports[0].dir, "/c/job-1");
  EXPECT_TRUE(reports[1].ended);
  // A stopped job ends the wait with Cancelled; another error of the write ends it with that.
  writes = -100;
  EXPECT_EQ(
      WriteWaitingForSpace(Fast(), hooks, "/w.safetensors", "w", write, [] { return true; }).code(),
      absl::StatusCode::kCancelled);
  auto broken = []() -> absl::StatusOr<std::string> { return absl::DataLossError("bad shard"); };
  EXPECT_EQ(WriteWaitingForSpace(Fast(), hooks, "w", "w", broken, [] { return false; }).code(),
            absl::StatusCode::kDataLoss);
}

TEST(FinalCheckpoint, TheWaitRunsOutWithTheReasonKept) {
  OneRank rank;
  rank.fits_at = 1 << 30;
  FinalCheckpointRetry retry = Fast();
  retry.wait = absl::Milliseconds(50);
  std::string skipped = "no room";
  ASSERT_TRUE(AwaitFinalCheckpoint(retry, rank.Hooks(), true, "the checkpoint of step 8, the last,",
                                   "/c/job-1", &skipped)
                  .ok());
  EXPECT_THAT(skipped,
              HasSubstr("dir has 10 bytes free, the step needs 20; waited 50ms for space"));
  EXPECT_GE(rank.writes, 2);
}

TEST(FinalCheckpoint, OtherRanksFollowRankZerosVerdict) {
  // A rank other than 0 never decides: agree() carries rank 0's verdict (here: try once more,
  // then sealed), whatever its own skip says.
  std::vector<float> verdicts = {1, 0};
  int writes = 0;
  FinalCheckpointHooks h;
  h.agree = [&](float mine) -> absl::StatusOr<float> {
    EXPECT_EQ(mine, 0);
    float v = verdicts.front();
    verdicts.erase(verdicts.begin());
    return v;
  };
  h.peers_ok = [] { return absl::OkStatus(); };
  h.write_again = [&]() -> absl::StatusOr<std::string> {
    ++writes;
    return std::string("rank 1's own reason");
  };
  std::string skipped;
  ASSERT_TRUE(AwaitFinalCheckpoint(Fast(), h, false, "the checkpoint of step 8, the last,",
                                   "/c/job-1", &skipped)
                  .ok());
  EXPECT_EQ(writes, 1);
  EXPECT_EQ(skipped, "");
}

TEST(FinalCheckpoint, AStoppedRunEndsTheWaitWithItsError) {
  OneRank rank;
  FinalCheckpointHooks h = rank.Hooks();
  h.peers_ok = [] { return absl::CancelledError("the job was cancelled"); };
  FinalCheckpointRetry retry = Fast();
  retry.first_delay = absl::Hours(1);
  std::string skipped = "no room";
  const absl::Status s = AwaitFinalCheckpoint(retry, h, true, "the checkpoint of step 8, the last,",
                                              "/c/job-1", &skipped);
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_EQ(rank.writes, 0);
}

TEST(FinalCheckpoint, AFailedAgreementIsReturned) {
  OneRank rank;
  FinalCheckpointHooks h = rank.Hooks();
  h.agree = [](float) -> absl::StatusOr<float> { return absl::UnavailableError("rank 1 gone"); };
  std::string skipped = "no room";
  EXPECT_TRUE(absl::IsUnavailable(AwaitFinalCheckpoint(
      Fast(), h, true, "the checkpoint of step 8, the last,", "/c/job-1", &skipped)));
}

}  // namespace
}  // namespace dtrain::parallel
