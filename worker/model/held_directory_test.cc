// HeldDirectory: names that escape, symlinks and oversized files are refused before anything is
// read, and a directory swapped for a symlink after it was opened does not redirect writes.
#include "worker/model/held_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/job_paths.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::model {
namespace {

using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const std::string dir = AbsolutePath(absl::StrCat(::testing::TempDir(), name, "-", getpid()));
  std::string cmd = absl::StrCat("rm -rf '", dir, "'");
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_TRUE(MakeDirectories(dir).ok());
  return dir;
}

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(IsPlainFileName, AcceptsFileNamesOnly) {
  EXPECT_TRUE(IsPlainFileName("model-pp0-tp0-c0.safetensors"));
  EXPECT_TRUE(IsPlainFileName("..hidden"));
  EXPECT_FALSE(IsPlainFileName(""));
  EXPECT_FALSE(IsPlainFileName("."));
  EXPECT_FALSE(IsPlainFileName(".."));
  EXPECT_FALSE(IsPlainFileName("../../etc/shadow"));
  EXPECT_FALSE(IsPlainFileName("/etc/shadow"));
  EXPECT_FALSE(IsPlainFileName(std::string("a\0b", 3)));
  EXPECT_FALSE(IsPlainFileName(std::string(256, 'a')));
}

TEST(QuoteBytes, EscapesNonUtf8) {
  EXPECT_EQ(QuoteBytes("step_1\xff\xfe\n"), "step_1\\xff\\xfe\\n");
}

TEST(HeldDirectory, RefusesAnEscapingNameNamingIt) {
  const std::string dir = FreshDir("held-escape");
  absl::StatusOr<HeldDirectory> held = HeldDirectory::Open(dir);
  ASSERT_TRUE(held.ok()) << held.status();
  absl::StatusOr<std::string> read = held->ReadFile("../../etc/shadow", 1 << 20);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("\"../../etc/shadow\" is not a plain file name"));
}

TEST(HeldDirectory, CreatingInADirectoryRemovedWhileHeldSaysSo) {
  // A job's directory removed by hand while the job runs (rm -rf): its next step says why.
  const std::string dir = FreshDir("held-removed");
  absl::StatusOr<HeldDirectory> held = HeldDirectory::Open(dir);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(std::system(absl::StrCat("rm -rf '", dir, "'").c_str()), 0);
  absl::StatusOr<HeldDirectory> step = held->CreateSubdirectory("step_00000200");
  EXPECT_EQ(step.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(step.status().message(),
              HasSubstr(absl::StrCat(dir, " itself was removed while in use")));
  const absl::Status file = held->WriteFileAtomically("latest", "step_00000200\n");
  EXPECT_THAT(file.message(), HasSubstr("itself was removed while in use"));
}

TEST(HeldDirectory, NeverFollowsASymlinkedFileOrDirectory) {
  const std::string dir = FreshDir("held-symlink");
  const std::string outside = FreshDir("held-symlink-outside");
  Write(outside + "/secret", "secret");
  ASSERT_EQ(symlink((outside + "/secret").c_str(), (dir + "/file").c_str()), 0);
  ASSERT_EQ(symlink(outside.c_str(), (dir + "/step_00000001").c_str()), 0);
  absl::StatusOr<HeldDirectory> held = HeldDirectory::Open(dir);
  ASSERT_TRUE(held.ok()) << held.status();
  absl::StatusOr<std::string> read = held->ReadFile("file", 100);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("symbolic link"));
  absl::StatusOr<HeldDirectory> step = held->OpenSubdirectory("step_00000001");
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.status().message(), HasSubstr("step_00000001 is a symbolic link"));
  EXPECT_EQ(held->KindOf("step_00000001"), HeldDirectory::Kind::kOther);
  // Writing over a symlink replaces the link, never the file it points at.
  ASSERT_TRUE(held->WriteFileAtomically("file", "new").ok());
  std::ifstream in(outside + "/secret");
  std::string kept((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(kept, "secret");
  // Removing a directory holding a symlink removes the link only.
  ASSERT_TRUE(held->CreateSubdirectory("step_00000002").ok());
  ASSERT_EQ(symlink(outside.c_str(), (dir + "/step_00000002/link").c_str()), 0);
  ASSERT_TRUE(held->Remove("step_00000002").ok());
  EXPECT_EQ(held->KindOf("step_00000002"), HeldDirectory::Kind::kMissing);
  EXPECT_EQ(access((outside + "/secret").c_str(), F_OK), 0);
}

TEST(HeldDirectory, RefusesAFileLargerThanAllowedBeforeReading) {
  const std::string dir = FreshDir("held-large");
  // 4 GiB, sparse: reading it would take the memory of a small host.
  const int fd = open((dir + "/big").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, int64_t{4} << 30), 0);
  close(fd);
  absl::StatusOr<HeldDirectory> held = HeldDirectory::Open(dir);
  ASSERT_TRUE(held.ok());
  absl::StatusOr<std::string> read = held->ReadFile("big", 1 << 20);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("big holds 4294967296 bytes"));
}

TEST(HeldDirectory, RefusesAFifoWithoutWaitingForAWriter) {
  const std::string dir = FreshDir("held-fifo");
  ASSERT_EQ(mkfifo((dir + "/manifest.json").c_str(), 0600), 0);
  absl::StatusOr<HeldDirectory> held = HeldDirectory::Open(dir);
  ASSERT_TRUE(held.ok());
  absl::StatusOr<std::string> read = held->ReadFile("manifest.json", 1 << 20);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("manifest.json is a FIFO, not a regular file"));
}

TEST(HeldDirectory, ASwapForASymlinkAfterOpeningDoesNotRedirectWrites) {
  const std::string parent = FreshDir("held-swap");
  const std::string outside = FreshDir("held-swap-outside");
  const std::string dir = parent + "/job-000001";
  ASSERT_TRUE(MakeDirectories(dir).ok());
  absl::StatusOr<HeldDirectory> held = HeldDirectory::Open(dir);
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(rename(dir.c_str(), (parent + "/moved").c_str()), 0);
  ASSERT_EQ(symlink(outside.c_str(), dir.c_str()), 0);
  ASSERT_TRUE(held->WriteFileAtomically("latest", "step_00000001\n").ok());
  EXPECT_EQ(access((outside + "/latest").c_str(), F_OK), -1);
  EXPECT_EQ(access((parent + "/moved/latest").c_str(), F_OK), 0);
  EXPECT_EQ(held->path(), dir);  // messages keep the name the job knows
}

}  // namespace
}  // namespace dtrain::model
