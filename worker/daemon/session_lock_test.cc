#include "worker/daemon/session_lock.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

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
  kill(child, SIGKILL);  // kill -9: the kernel releases its lock
  waitpid(child, nullptr, 0);
  absl::StatusOr<SessionLock> third = SessionLock::Claim(dir, "w1", "s3");
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->previous_session(), "s1");
}

}  // namespace
}  // namespace dtrain::worker
