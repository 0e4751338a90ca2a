// Run claims: a later attempt's claim is never taken back by an earlier run, and a run whose
// claim was replaced is told so, naming both runs.
#include "worker/model/run_claim.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/job_paths.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::model {
namespace {

using ::testing::HasSubstr;

HeldDirectory FreshDir(const std::string& name) {
  const std::string dir = AbsolutePath(absl::StrCat(::testing::TempDir(), name, "-", getpid()));
  const std::string cmd = absl::StrCat("rm -rf '", dir, "'");
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  absl::StatusOr<HeldDirectory> held = HeldDirectory::Create(dir);
  EXPECT_TRUE(held.ok()) << held.status();
  return *held;
}

std::string Contents(const HeldDirectory& dir) {
  absl::StatusOr<std::string> text = dir.ReadFile(kRunClaimFileName, 4096);
  return text.ok() ? *text : text.status().ToString();
}

TEST(RunClaim, TheRunThatClaimedLastHoldsTheDirectory) {
  const HeldDirectory dir = FreshDir("claim-last");
  const RunClaim first{0, "aaaa00000001"}, second{1, "bbbb00000002"};
  ASSERT_TRUE(ClaimRun(dir, first).ok());
  EXPECT_EQ(Contents(dir), "attempt 0 run aaaa00000001\n");
  EXPECT_TRUE(CheckRunClaim(dir, first).ok());
  ASSERT_TRUE(ClaimRun(dir, second).ok());
  EXPECT_TRUE(CheckRunClaim(dir, second).ok());
  const absl::Status stale = CheckRunClaim(dir, first);
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(stale.message(), HasSubstr(absl::StrCat("job directory ", dir.path(),
                                                      " is written by another run (attempt 1, "
                                                      "run bbbb00000002), not by this one "
                                                      "(attempt 0, run aaaa00000001)")));
}

TEST(RunClaim, AnEarlierAttemptNeverTakesTheDirectoryBack) {
  // A run frozen before its claim, woken after its replacement claimed.
  const HeldDirectory dir = FreshDir("claim-earlier");
  ASSERT_TRUE(ClaimRun(dir, {2, "cccc00000003"}).ok());
  const absl::Status late = ClaimRun(dir, {1, "bbbb00000002"});
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(late.message(), HasSubstr("is written by a later run (attempt 2, run cccc00000003) "
                                        "than this one (attempt 1, run bbbb00000002)"));
  EXPECT_EQ(Contents(dir), "attempt 2 run cccc00000003\n");
  // Another run of the same attempt (a recovery placed again) takes it.
  ASSERT_TRUE(ClaimRun(dir, {2, "dddd00000004"}).ok());
  EXPECT_TRUE(CheckRunClaim(dir, {2, "dddd00000004"}).ok());
  EXPECT_FALSE(CheckRunClaim(dir, {2, "cccc00000003"}).ok());
}

TEST(RunClaim, NoClaimOrAnUnreadableOneHoldsNothing) {
  const HeldDirectory dir = FreshDir("claim-garbage");
  const absl::Status none = CheckRunClaim(dir, {0, "aaaa00000001"});
  EXPECT_EQ(none.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(none.message(), HasSubstr("is written by no run (" + dir.PathOf("run") +
                                        " is missing or unreadable)"));
  for (const std::string garbage : {"attempt x run y\n", "\xff\xfe", "attempt 9 run\n"}) {
    std::ofstream(dir.PathOf("run"), std::ios::binary | std::ios::trunc) << garbage;
    EXPECT_FALSE(CheckRunClaim(dir, {9, "y"}).ok()) << garbage;
    ASSERT_TRUE(ClaimRun(dir, {0, "aaaa00000001"}).ok()) << garbage;
    EXPECT_TRUE(CheckRunClaim(dir, {0, "aaaa00000001"}).ok()) << garbage;
  }
  // A symbolic link planted in the claim's place is replaced, never followed.
  const std::string target = dir.PathOf("elsewhere");
  std::ofstream(target) << "attempt 7 run eeee00000007\n";
  ASSERT_EQ(unlink(dir.PathOf("run").c_str()), 0);
  ASSERT_EQ(symlink(target.c_str(), dir.PathOf("run").c_str()), 0);
  EXPECT_FALSE(CheckRunClaim(dir, {7, "eeee00000007"}).ok());
  ASSERT_TRUE(ClaimRun(dir, {0, "aaaa00000001"}).ok());
  std::ifstream in(target);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "attempt 7 run eeee00000007\n");
}

}  // namespace
}  // namespace dtrain::model
