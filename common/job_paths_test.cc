#include "common/job_paths.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TempDir() {
  std::string templ =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/job_paths_XXXXXX";
  return mkdtemp(templ.data());
}

TEST(JobDirectory, UnderCheckpointDirOrDataRoot) {
  EXPECT_EQ(JobDirectory("/ckpt", "job-000003", "/data"), "/ckpt/job-000003");
  EXPECT_EQ(JobDirectory("/ckpt/", "job-000003", "/data"), "/ckpt/job-000003");
  EXPECT_EQ(JobDirectory("", "job-000003", "/data/"), "/data/jobs/job-000003");
  EXPECT_EQ(JobDirectory("runs/c", "job-000003", "/data"), "runs/c/job-000003");
}

TEST(IsJobId, OnlyJobDashDigits) {
  EXPECT_TRUE(IsJobId("job-000012"));
  EXPECT_TRUE(IsJobId("job-1"));
  EXPECT_FALSE(IsJobId("job-"));
  EXPECT_FALSE(IsJobId("job-12/.."));
  EXPECT_FALSE(IsJobId("runs/job-000012"));
  EXPECT_FALSE(IsJobId("12"));
}

TEST(JobNumberIn, AnySpellingOfAnId) {
  EXPECT_EQ(JobNumberIn("job-12"), 12);
  EXPECT_EQ(JobNumberIn("job-000012"), 12);
  for (const char* other : {"job-0", "job-", "12", "job-1a", "runs/job-1"}) {
    EXPECT_EQ(JobNumberIn(other), std::nullopt) << other;
  }
}

TEST(JobNumberOf, OnlyTheOneSpellingOfAnId) {
  EXPECT_EQ(JobNumberOf("job-000012"), 12);
  EXPECT_EQ(JobNumberOf("job-1234567"), 1234567);
  for (const char* other : {"job-12", "job-0000012", "job-000000", "job-", "12", "job-00001a",
                            "job-+00012", "job--00012", " job-000012"}) {
    EXPECT_EQ(JobNumberOf(other), std::nullopt) << other;
  }
}

TEST(AbsolutePath, LexicallyNormalized) {
  EXPECT_EQ(AbsolutePath(""), "");
  EXPECT_EQ(AbsolutePath("/a/./b//c/../d/"), "/a/b/d");
  EXPECT_EQ(AbsolutePath("/.."), "/");
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_EQ(AbsolutePath("x/y"), std::string(cwd) + "/x/y");
}

TEST(ClaimJobDirectory, SameUidAgainIsOk) {
  const std::string dir = TempDir() + "/ckpt/job-000001";
  ASSERT_TRUE(ClaimJobDirectory(dir, "job-000001", "aaaa").ok());
  EXPECT_TRUE(ClaimJobDirectory(dir, "job-000001", "aaaa").ok());
  std::ifstream in(dir + "/job.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("\"job_uid\": \"aaaa\""));
}

TEST(ClaimJobDirectory, AnotherUidIsRefusedNamingBoth) {
  const std::string dir = TempDir() + "/job-000001";
  ASSERT_TRUE(ClaimJobDirectory(dir, "job-000001", "aaaa").ok());
  const absl::Status s = ClaimJobDirectory(dir, "job-000001", "bbbb");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(dir));
  EXPECT_THAT(s.message(), HasSubstr("uid aaaa"));
  EXPECT_THAT(s.message(), HasSubstr("uid bbbb"));
}

TEST(ClaimJobDirectory, UnclaimedCheckpointsAreRefused) {
  const std::string dir = TempDir() + "/job-000002";
  ASSERT_TRUE(MakeDirectories(dir + "/step_00000010").ok());
  const absl::Status s = ClaimJobDirectory(dir, "job-000002", "cccc");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("already holds checkpoints"));
}

TEST(ReadJobClaim, ReadsWhatClaimJobDirectoryWrote) {
  const std::string dir = TempDir() + "/job-000004";
  ASSERT_TRUE(ClaimJobDirectory(dir, "job-000004", "dddd").ok());
  const absl::StatusOr<JobClaim> claim = ReadJobClaim(dir);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ(claim->job_id, "job-000004");
  EXPECT_EQ(claim->job_uid, "dddd");
}

TEST(ReadJobClaim, NoClaimIsNotFoundNamingTheDirectory) {
  const std::string dir = TempDir();
  const absl::StatusOr<JobClaim> claim = ReadJobClaim(dir);
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(claim.status().message(), HasSubstr(dir));
  EXPECT_THAT(claim.status().message(), HasSubstr("job.json"));
  EXPECT_EQ(ReadJobClaim(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(MakeDirectories, FileInTheWayIsNamed) {
  const std::string base = TempDir();
  std::ofstream(base + "/file") << "x";
  const absl::Status s = MakeDirectories(base + "/file/sub");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(base + "/file"));
  // The errno's text once, as in common/files.h ("...: Not a directory").
  EXPECT_THAT(s.message(), Not(HasSubstr("directory: Not a directory")));
}

}  // namespace
}  // namespace dtrain
