#include "coordinator/pause_detector.h"

#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

TEST(PauseDetector, GapsWithinTheThresholdAreNoPause) {
  absl::Duration now = absl::Seconds(100);
  PauseDetector d(absl::Seconds(1), [&] { return now; });
  EXPECT_FALSE(d.Observe().has_value());  // the first observation
  for (int i = 0; i < 20; ++i) {
    now += absl::Milliseconds(200);
    EXPECT_FALSE(d.Observe().has_value());
  }
  now += absl::Seconds(1);  // exactly the threshold
  EXPECT_FALSE(d.Observe().has_value());
  EXPECT_EQ(d.pauses(), 0);
}

TEST(PauseDetector, AGapAboveTheThresholdIsReportedOnceWithItsLength) {
  absl::Duration now = absl::Seconds(100);
  PauseDetector d(absl::Seconds(1), [&] { return now; });
  d.Observe();
  now += absl::Seconds(18);  // SIGSTOP, SIGCONT
  EXPECT_EQ(d.Observe(), absl::Seconds(18));
  EXPECT_FALSE(d.Observe().has_value());  // the next call, at once
  now += absl::Milliseconds(100);
  EXPECT_FALSE(d.Observe().has_value());
  EXPECT_EQ(d.pauses(), 1);
}

TEST(PauseDetector, NoClockNeverPauses) {
  PauseDetector d(absl::Seconds(1), nullptr);
  EXPECT_FALSE(d.Observe().has_value());
  EXPECT_FALSE(d.Observe().has_value());
}

TEST(PauseDetector, TheSteadyClockMovesForward) {
  const absl::Duration a = SteadyNow();
  EXPECT_GE(SteadyNow(), a);
}

}  // namespace
}  // namespace dtrain::coordinator
