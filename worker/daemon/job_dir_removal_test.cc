// RemoveJobDirectory on real directories: what it removes, and everything it refuses to.
#include "worker/daemon/job_dir_removal.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/job_paths.h"
#include "common/path_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::worker {
namespace {

using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

void WriteBytes(const std::string& path, int bytes) {
  std::ofstream(path) << std::string(bytes, 'x');
}

int64_t SizeOf(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// A fresh allowed root (resolved) and a directory beside it, outside the roots.
class RemoveJobDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string base = ::testing::TempDir() + "/removal_XXXXXX";
    ASSERT_NE(mkdtemp(base.data()), nullptr);
    ASSERT_TRUE(MakeDirectories(base + "/root").ok());
    ASSERT_TRUE(MakeDirectories(base + "/outside").ok());
    roots_ = ResolveRoots({base + "/root"}).value();
    root_ = roots_.at(0);
    outside_ = ResolveRoots({base + "/outside"}).value().at(0);
  }

  // A job directory under the root, claimed by `job_id` with `uid`, with one step of
  // `step_bytes` bytes: returns its path.
  std::string ClaimedDir(const std::string& job_id, const std::string& uid, int step_bytes) {
    const std::string dir = root_ + "/ckpt/" + job_id;
    EXPECT_TRUE(ClaimJobDirectory(dir, job_id, uid).ok());
    EXPECT_TRUE(MakeDirectories(dir + "/step_00000010").ok());
    WriteBytes(dir + "/step_00000010/shard_0.safetensors", step_bytes);
    std::ofstream(dir + "/latest") << "step_00000010\n";
    return dir;
  }

  static JobDirRemoval Removal(const std::string& job_id, const std::string& uid,
                               const std::string& dir) {
    JobDirRemoval r;
    r.set_job_id(job_id);
    r.set_job_uid(uid);
    r.set_dir(dir);
    return r;
  }

  JobDirRemoved Remove(const JobDirRemoval& r) {
    return RemoveJobDirectory(r, roots_, "w1", "host-a");
  }

  std::vector<std::string> roots_;
  std::string root_;
  std::string outside_;
};

TEST_F(RemoveJobDirectoryTest, RemovesAClaimedDirectoryWithItsStepsAndCountsItsBytes) {
  const std::string dir = ClaimedDir("job-000003", "uid-3", 5000);
  const int64_t expected = 5000 + SizeOf(dir + "/job.json") + SizeOf(dir + "/latest");
  const JobDirRemoved r = Remove(Removal("job-000003", "uid-3", dir));
  EXPECT_EQ(r.state(), DIR_REMOVED) << r.error();
  EXPECT_EQ(r.bytes(), expected);
  EXPECT_EQ(r.error(), "");
  EXPECT_EQ(r.job_id(), "job-000003");
  EXPECT_EQ(r.dir(), dir);
  EXPECT_EQ(r.worker_id(), "w1");
  EXPECT_EQ(r.host(), "host-a");
  EXPECT_FALSE(Exists(dir));
  EXPECT_TRUE(Exists(root_ + "/ckpt"));  // its parent stays
  EXPECT_THAT(DescribeJobDirRemoved(r), HasSubstr("removed job directory " + dir));
}

TEST_F(RemoveJobDirectoryTest, AMissingDirectoryIsAbsent) {
  const std::string dir = root_ + "/ckpt/job-000004";
  const JobDirRemoved r = Remove(Removal("job-000004", "uid-4", dir));
  EXPECT_EQ(r.state(), DIR_ABSENT);
  EXPECT_EQ(r.error(), "");
  EXPECT_EQ(r.dir(), dir);
  EXPECT_EQ(r.worker_id(), "w1");
  EXPECT_EQ(r.host(), "host-a");
}

TEST_F(RemoveJobDirectoryTest, AnotherUidsDirectoryIsLeftWhole) {
  const std::string dir = ClaimedDir("job-000005", "uid-theirs", 100);
  const JobDirRemoved r = Remove(Removal("job-000005", "uid-ours", dir));
  EXPECT_EQ(r.state(), DIR_REMOVAL_FAILED);
  EXPECT_THAT(r.error(), HasSubstr(dir));
  EXPECT_THAT(r.error(), HasSubstr("belongs to job-000005 (uid uid-theirs), not to job-000005 "
                                   "(uid uid-ours)"));
  EXPECT_EQ(r.bytes(), 0);
  EXPECT_TRUE(Exists(dir + "/step_00000010/shard_0.safetensors"));
  EXPECT_TRUE(Exists(dir + "/job.json"));
}

TEST_F(RemoveJobDirectoryTest, AnUnclaimedDirectoryIsLeftWhole) {
  const std::string dir = root_ + "/ckpt/job-000006";
  ASSERT_TRUE(MakeDirectories(dir + "/step_00000010").ok());
  WriteBytes(dir + "/step_00000010/shard_0.safetensors", 100);
  const JobDirRemoved r = Remove(Removal("job-000006", "uid-6", dir));
  EXPECT_EQ(r.state(), DIR_REMOVAL_FAILED);
  EXPECT_THAT(r.error(), HasSubstr(dir + " has no job.json claim: not removed; remove it by hand"));
  EXPECT_TRUE(Exists(dir + "/step_00000010/shard_0.safetensors"));
}

TEST_F(RemoveJobDirectoryTest, ADirectoryOutsideTheRootsIsLeftWhole) {
  const std::string dir = outside_ + "/job-000007";
  ASSERT_TRUE(ClaimJobDirectory(dir, "job-000007", "uid-7").ok());
  const JobDirRemoved r = Remove(Removal("job-000007", "uid-7", dir));
  EXPECT_EQ(r.state(), DIR_REMOVAL_FAILED);
  EXPECT_THAT(r.error(), HasSubstr(dir));
  EXPECT_THAT(r.error(), HasSubstr("outside this worker's allowed roots"));
  EXPECT_TRUE(Exists(dir + "/job.json"));
}

TEST_F(RemoveJobDirectoryTest, ASymlinkedDirectoryPointingOutsideIsLeftWithItsTarget) {
  const std::string target = outside_ + "/job-000008";
  ASSERT_TRUE(ClaimJobDirectory(target, "job-000008", "uid-8").ok());
  ASSERT_TRUE(MakeDirectories(root_ + "/ckpt").ok());
  const std::string dir = root_ + "/ckpt/job-000008";
  ASSERT_EQ(symlink(target.c_str(), dir.c_str()), 0);
  const JobDirRemoved r = Remove(Removal("job-000008", "uid-8", dir));
  EXPECT_EQ(r.state(), DIR_REMOVAL_FAILED);
  EXPECT_THAT(r.error(), HasSubstr(dir));
  EXPECT_TRUE(Exists(target + "/job.json"));
  EXPECT_TRUE(Exists(dir));
}

TEST_F(RemoveJobDirectoryTest, ASymlinkedDirectoryInsideTheRootsIsLeftToo) {
  const std::string target = ClaimedDir("job-000009", "uid-9", 10);
  const std::string dir = root_ + "/other/job-000009";
  ASSERT_TRUE(MakeDirectories(root_ + "/other").ok());
  ASSERT_EQ(symlink(target.c_str(), dir.c_str()), 0);
  const JobDirRemoved r = Remove(Removal("job-000009", "uid-9", dir));
  EXPECT_EQ(r.state(), DIR_REMOVAL_FAILED);
  EXPECT_THAT(r.error(), HasSubstr(dir + " is a symlink"));
  EXPECT_TRUE(Exists(target + "/job.json"));
}

TEST_F(RemoveJobDirectoryTest, ADirectoryNotNamedForTheJobIsLeftWhole) {
  const std::string dir = ClaimedDir("job-000010", "uid-10", 10);
  const JobDirRemoved r = Remove(Removal("job-000011", "uid-10", dir));
  EXPECT_EQ(r.state(), DIR_REMOVAL_FAILED);
  EXPECT_THAT(r.error(), HasSubstr(dir + " is not named for job-000011"));
  // Nor a parent of the job's directory, nor an id that is a path.
  EXPECT_EQ(Remove(Removal("job-000010", "uid-10", root_ + "/ckpt")).state(), DIR_REMOVAL_FAILED);
  EXPECT_EQ(Remove(Removal("ckpt", "uid-10", root_ + "/ckpt")).state(), DIR_REMOVAL_FAILED);
  EXPECT_TRUE(Exists(dir + "/job.json"));
}

TEST_F(RemoveJobDirectoryTest, ARelativeOrUnnormalizedPathIsRefused) {
  const std::string dir = ClaimedDir("job-000012", "uid-12", 10);
  const JobDirRemoved relative = Remove(Removal("job-000012", "uid-12", "ckpt/job-000012"));
  EXPECT_EQ(relative.state(), DIR_REMOVAL_FAILED);
  EXPECT_THAT(relative.error(), HasSubstr("ckpt/job-000012 is not an absolute, normalized path"));
  const JobDirRemoved dotted =
      Remove(Removal("job-000012", "uid-12", root_ + "/ckpt/../ckpt/job-000012"));
  EXPECT_EQ(dotted.state(), DIR_REMOVAL_FAILED);
  EXPECT_EQ(Remove(Removal("job-000012", "uid-12", dir + "/")).state(), DIR_REMOVAL_FAILED);
  EXPECT_TRUE(Exists(dir + "/job.json"));
}

TEST_F(RemoveJobDirectoryTest, ALinkInsideIsRemovedAsALinkItsTargetKept) {
  const std::string dir = ClaimedDir("job-000013", "uid-13", 100);
  const std::string secret = outside_ + "/secret.txt";
  WriteBytes(secret, 7000);
  ASSERT_EQ(symlink(secret.c_str(), (dir + "/step_00000010/link").c_str()), 0);
  ASSERT_EQ(symlink(outside_.c_str(), (dir + "/dirlink").c_str()), 0);
  const JobDirRemoved r = Remove(Removal("job-000013", "uid-13", dir));
  EXPECT_EQ(r.state(), DIR_REMOVED) << r.error();
  EXPECT_LT(r.bytes(), 7000);  // the target's bytes are not counted
  EXPECT_FALSE(Exists(dir));
  EXPECT_EQ(SizeOf(secret), 7000);
  EXPECT_TRUE(Exists(outside_));
}

TEST_F(RemoveJobDirectoryTest, ARootItselfIsNotRemoved) {
  std::string base = ::testing::TempDir() + "/removal_root_XXXXXX";
  ASSERT_NE(mkdtemp(base.data()), nullptr);
  const std::string dir = base + "/job-000014";
  ASSERT_TRUE(ClaimJobDirectory(dir, "job-000014", "uid-14").ok());
  const std::vector<std::string> roots = ResolveRoots({dir}).value();
  const JobDirRemoved r =
      RemoveJobDirectory(Removal("job-000014", "uid-14", roots.at(0)), roots, "w1", "host-a");
  EXPECT_EQ(r.state(), DIR_REMOVAL_FAILED);
  EXPECT_THAT(r.error(), HasSubstr("one of this worker's allowed roots"));
  EXPECT_TRUE(Exists(dir + "/job.json"));
}

}  // namespace
}  // namespace dtrain::worker
