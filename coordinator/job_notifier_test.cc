#include "coordinator/job_notifier.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

TEST(JobNotifier, CallbackRunsOnceOnTheNextNotify) {
  JobNotifier n;
  int calls = 0;
  JobNotifier::Token token;
  ASSERT_TRUE(n.WaitOnce(
      "job-1", n.Version("job-1"), [&] { ++calls; }, &token));
  n.Notify("job-2");
  EXPECT_EQ(calls, 0);
  n.Notify("job-1");
  EXPECT_EQ(calls, 1);
  n.Notify("job-1");
  EXPECT_EQ(calls, 1);
}

TEST(JobNotifier, AChangeBetweenReadAndWaitIsNotMissed) {
  JobNotifier n;
  const uint64_t seen = n.Version("job-1");
  n.Notify("job-1");  // committed after the watcher read the store
  JobNotifier::Token token;
  EXPECT_FALSE(n.WaitOnce(
      "job-1", seen, [] {}, &token));
}

TEST(JobNotifier, CancelledCallbacksNeverRun) {
  JobNotifier n;
  int calls = 0;
  JobNotifier::Token token;
  ASSERT_TRUE(n.WaitOnce(
      "job-1", 0, [&] { ++calls; }, &token));
  EXPECT_TRUE(n.Cancel(token));
  EXPECT_FALSE(n.Cancel(token));
  n.Notify("job-1");
  EXPECT_EQ(calls, 0);
}

TEST(JobNotifier, ShutdownRunsEveryCallbackAndRefusesNewOnes) {
  JobNotifier n;
  int calls = 0;
  JobNotifier::Token a, b, c;
  ASSERT_TRUE(n.WaitOnce(
      "job-1", 0, [&] { ++calls; }, &a));
  ASSERT_TRUE(n.WaitOnce(
      "job-2", 0, [&] { ++calls; }, &b));
  n.Shutdown();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(n.is_shut_down());
  EXPECT_FALSE(n.WaitOnce(
      "job-1", n.Version("job-1"), [&] { ++calls; }, &c));
}

TEST(JobNotifier, ForgetNeverRepeatsAVersion) {
  JobNotifier n;
  n.Notify("job-1");
  const uint64_t seen = n.Version("job-1");
  n.Forget("job-1");
  n.Notify("job-1");
  EXPECT_NE(n.Version("job-1"), seen);
  JobNotifier::Token token;
  EXPECT_FALSE(n.WaitOnce(
      "job-1", seen, [] {}, &token));
}

TEST(JobNotifier, ConcurrentWaitersAndNotifiersLoseNoWakeup) {
  // Each waiter loops: read version, "find nothing", wait; every notify must wake it.
  JobNotifier n;
  std::atomic<int> woken{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        std::atomic<bool> fired{false};
        JobNotifier::Token token;
        if (!n.WaitOnce(
                "job-1", n.Version("job-1"), [&] { fired = true; }, &token))
          continue;
        while (!fired.load() && !stop.load()) std::this_thread::yield();
        if (!fired.load() && !n.Cancel(token)) {
          while (!fired.load()) std::this_thread::yield();  // it is running right now
        }
        if (fired.load()) ++woken;
      }
    });
  }
  // Notify until the waiters have been woken many times (a lost wakeup would leave a waiter
  // parked for good and the count stuck); bounded so a bug fails instead of hanging.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (woken.load() < 200 && std::chrono::steady_clock::now() < deadline) {
    n.Notify("job-1");
    std::this_thread::yield();
  }
  stop = true;
  n.Shutdown();
  for (std::thread& t : threads) t.join();
  EXPECT_GE(woken.load(), 200);
}

}  // namespace
}  // namespace dtrain::coordinator
