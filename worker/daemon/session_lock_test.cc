#include "worker/daemon/session_lock.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::worker {
namespace {

using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  mkdir(dir.c_str(), 0700);
  return dir;
}

TEST(SessionLock, TheFirstProcessHasNoPreviousSession) {
  const std::string dir = TempDir("first");
  absl::StatusOr<SessionLock> lock = SessionLock::Claim(dir, "w1", "s1");
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(lock->previous_session(), "");
}

TEST(SessionLock, TheNextProcessLearnsTheDeadOnesSession) {
  const std::string dir = TempDir("next");
  { ASSERT_TRUE(SessionLock::Claim(dir, "w1", "s1").ok()); }  // released: that process died
  absl::StatusOr<SessionLock> lock = SessionLock::Claim(dir, "w1", "s2");
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(lock->previous_session(), "s1");
  // Another worker id has its own file.
  absl::StatusOr<SessionLock> other = SessionLock::Claim(dir, "w2", "s9");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->previous_session(), "");
}

// A live holder in another process (flock locks belong to the open file: a child's own open).
TEST(SessionLock, ASecondLiveProcessWithTheSameIdIsRefused) {
  const std::string dir = TempDir("second");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<SessionLock> lock = SessionLock::Claim(dir, "w1", "s1");
    const char c = lock.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();  // until killed
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  absl::StatusOr<SessionLock> second = SessionLock::Claim(dir, "w1", "s2");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("another dtrain-worker process with "
                                                   "--worker_id=w1"));
  // Waiting: refused after the wait, having said why it waits.
  std::vector<std::string> said;
  const absl::Time start = absl::Now();
  absl::StatusOr<SessionLock> patient =
      SessionLock::Claim(dir, "w1", "s2", absl::Milliseconds(300),
                         [&](const std::string& why) { said.push_back(why); });
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(patient.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(patient.status().message(), HasSubstr("and still was after 300ms"));
  ASSERT_EQ(said.size(), 1u);
  EXPECT_THAT(said[0], HasSubstr("waiting up to 300ms for it to exit"));
  kill(child, SIGKILL);  // kill -9: the kernel releases its lock
  waitpid(child, nullptr, 0);
  absl::StatusOr<SessionLock> third = SessionLock::Claim(dir, "w1", "s3");
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->previous_session(), "s1");
}

// The holder exits while the next process waits (a worker stopped by SIGTERM, still
// delivering its last reports, and its replacement started at once): the lock is taken then.
TEST(SessionLock, TheNextProcessWaitsForAStoppingHolder) {
  const std::string dir = TempDir("stopping");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<SessionLock> lock = SessionLock::Claim(dir, "w1", "s1");
    (void)!write(ready[1], "y", 1);
    usleep(400 * 1000);  // stopping
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  int waits = 0;
  absl::StatusOr<SessionLock> next =
      SessionLock::Claim(dir, "w1", "s2", absl::Seconds(20), [&](const std::string&) { ++waits; });
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->previous_session(), "s1");
  EXPECT_EQ(waits, 1);
  waitpid(child, nullptr, 0);
}

}  // namespace
}  // namespace dtrain::worker
