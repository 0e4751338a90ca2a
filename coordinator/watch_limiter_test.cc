#include "coordinator/watch_limiter.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

TEST(WatchLimiter, TheCapPerClientThenAPlaceFreesWhenAStreamEnds) {
  WatchLimiter limiter(2);
  std::vector<WatchLimiter::Slot> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<WatchLimiter::Slot> slot = limiter.Acquire("ipv4:10.0.0.7");
    ASSERT_TRUE(slot.ok()) << slot.status();
    held.push_back(*std::move(slot));
  }
  const absl::Status refused = limiter.Acquire("ipv4:10.0.0.7").status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "too many watches from this client (2 open); close some or raise "
            "--max_watches_per_client");
  EXPECT_TRUE(limiter.Acquire("cert:alice").ok());  // another client counts apart
  EXPECT_EQ(limiter.open("cert:alice"), 0);         // that slot was dropped at once
  held.pop_back();
  EXPECT_EQ(limiter.open("ipv4:10.0.0.7"), 1);
  EXPECT_TRUE(limiter.Acquire("ipv4:10.0.0.7").ok());
}

TEST(WatchLimiter, AMovedSlotIsReleasedOnce) {
  WatchLimiter limiter(1);
  WatchLimiter::Slot a = *limiter.Acquire("c");
  WatchLimiter::Slot b = std::move(a);
  EXPECT_EQ(limiter.open("c"), 1);
  a = std::move(b);
  EXPECT_EQ(limiter.open("c"), 1);
  a = WatchLimiter::Slot();
  EXPECT_EQ(limiter.open("c"), 0);
}

TEST(WatchLimiter, ZeroMeansNoCap) {
  WatchLimiter limiter(0);
  std::vector<WatchLimiter::Slot> held;
  for (int i = 0; i < 100; ++i) held.push_back(*limiter.Acquire("c"));
  EXPECT_EQ(limiter.open("c"), 100);
}

}  // namespace
}  // namespace dtrain::coordinator
