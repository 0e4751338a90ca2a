#include "coordinator/heartbeat_pace.h"

#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

const HeartbeatPace kBase{absl::Seconds(1), absl::Seconds(10)};

TEST(PaceFor, TheConfiguredPaceWhileTheRateFits) {
  for (int64_t live : {0, 1, 1000, 10'000}) {
    const HeartbeatPace p = PaceFor(kBase, live, 10'000);
    EXPECT_EQ(p.interval, absl::Seconds(1)) << live;
    EXPECT_EQ(p.lease, absl::Seconds(10)) << live;
  }
}

TEST(PaceFor, LongerBeyondTheRateWithTheLeaseInTheSameRatio) {
  HeartbeatPace p = PaceFor(kBase, 50'000, 10'000);
  EXPECT_EQ(p.interval, absl::Seconds(5));
  EXPECT_EQ(p.lease, absl::Seconds(50));
  p = PaceFor(kBase, 10'001, 10'000);  // rounded up to whole ms: the rate never exceeds the cap
  EXPECT_EQ(p.interval, absl::Milliseconds(1001));
  EXPECT_LE(10'001 / absl::ToDoubleSeconds(p.interval), 10'000);
  EXPECT_EQ(p.lease / p.interval, kBase.lease / kBase.interval);
}

TEST(PaceFor, NoCapKeepsTheConfiguredPace) {
  EXPECT_EQ(PaceFor(kBase, 1'000'000, 0).interval, absl::Seconds(1));
}

}  // namespace
}  // namespace dtrain::coordinator
