#include "coordinator/bounded_executor.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

TEST(BoundedExecutor, RunsTasksOnItsOwnThreads) {
  BoundedExecutor executor(2, 8);
  absl::Notification done;
  std::thread::id ran_on;
  ASSERT_TRUE(executor
                  .Schedule([&] {
                    ran_on = std::this_thread::get_id();
                    done.Notify();
                  })
                  .ok());
  done.WaitForNotification();
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(BoundedExecutor, RefusesWhenTheQueueIsFullAndAfterStop) {
  BoundedExecutor executor(1, 2);
  absl::Notification started, release;
  std::atomic<int> ran{0};
  ASSERT_TRUE(executor
                  .Schedule([&] {
                    started.Notify();
                    release.WaitForNotification();
                    ++ran;
                  })
                  .ok());
  started.WaitForNotification();  // the thread is busy: the next two wait in the queue
  ASSERT_TRUE(executor.Schedule([&] { ++ran; }).ok());
  ASSERT_TRUE(executor.Schedule([&] { ++ran; }).ok());
  const absl::Status full = executor.Schedule([&] { ++ran; });
  EXPECT_EQ(full.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(full.message(), ::testing::HasSubstr("2 requests of this kind are waiting"));
  release.Notify();
  executor.Stop();  // runs the queued ones first
  EXPECT_EQ(ran, 3);
  EXPECT_EQ(executor.Schedule([] {}).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dtrain::coordinator
