// Whole-file reads and atomic writes: the new contents replace the old whole or not at all, no
// temp file is left behind, and every error names the path with its errno's code.
#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  static int counter = 0;
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/files_", counter++);
  EXPECT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
  return dir;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

TEST(DirectoryBytes, SumsTheRegularFilesBelowWithoutFollowingSymlinks) {
  const std::string dir = TempDir();
  EXPECT_EQ(DirectoryBytes(dir + "/missing"), 0);
  ASSERT_TRUE(WriteFileAtomically(dir + "/a", std::string(1000, 'a')).ok());
  ASSERT_EQ(mkdir((dir + "/step").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(dir + "/step/b", std::string(24, 'b')).ok());
  const std::string outside = TempDir();
  ASSERT_TRUE(WriteFileAtomically(outside + "/big", std::string(5000, 'c')).ok());
  ASSERT_EQ(symlink(outside.c_str(), (dir + "/link").c_str()), 0);
  EXPECT_EQ(DirectoryBytes(dir), 1024);
}

TEST(WriteFileAtomically, ReplacesTheWholeFileAndLeavesNoTempFile) {
  const std::string path = TempDir() + "/latest";
  ASSERT_TRUE(WriteFileAtomically(path, "step_00000010\n").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "step_00000020\n").ok());
  absl::StatusOr<std::string> back = ReadFileToString(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "step_00000020\n");
  EXPECT_FALSE(Exists(absl::StrCat(path, ".tmp.", getpid())));
}

TEST(WriteFileAtomically, EmptyContentsGiveAnEmptyFile) {
  const std::string path = TempDir() + "/empty";
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  EXPECT_EQ(ReadFileToString(path).value(), "");
}

TEST(WriteFileAtomically, MissingDirectoryIsNotFoundNamingTheTempFile) {
  const std::string path = TempDir() + "/no/such/dir/latest";
  const absl::Status s = WriteFileAtomically(path, "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("cannot create ", path, ".tmp.")));
}

TEST(AtomicFileWriter, AWriterDroppedBeforeCommitLeavesTheOldFile) {
  const std::string path = TempDir() + "/model.safetensors";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Create(path);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->Append("half of the new").ok());
    EXPECT_TRUE(Exists(w->temp_path()));
  }
  EXPECT_EQ(ReadFileToString(path).value(), "old");
  EXPECT_FALSE(Exists(absl::StrCat(path, ".tmp.", getpid())));
}

TEST(AtomicFileWriter, CommitTwiceIsFailedPrecondition) {
  const std::string path = TempDir() + "/f";
  absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Create(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Commit().ok());
  EXPECT_EQ(w->Commit().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w->Append("x").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ReadFileToString, MissingFileIsNotFoundNamingThePathOnce) {
  const std::string path = TempDir() + "/missing";
  const absl::Status s = ReadFileToString(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), absl::StrCat("cannot open ", path, ": No such file or directory"));
}

TEST(ReadFileToString, DirectoryIsInvalidArgument) {
  const std::string dir = TempDir();
  const absl::Status s = ReadFileToString(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(dir + " is a directory, not a regular file"));
}

// A FIFO with no writer would block open(2) forever (a job's dataset named one and its worker
// stayed busy with the cancelled job until kill -9): refused at once.
TEST(ReadFileToString, AFifoIsRefusedAtOnceNotWaitedOn) {
  const std::string fifo = TempDir() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const absl::Status s = ReadFileToString(fifo).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), fifo + " is a FIFO, not a regular file");
  EXPECT_THAT(ReadFileToString("/dev/null").status().message(),
              HasSubstr("/dev/null is a device, not a regular file"));
}

TEST(RequireRegularFile, LeavesARegularFileBlocking) {
  const std::string path = TempDir() + "/plain";
  ASSERT_TRUE(WriteFileAtomically(path, "bytes").ok());
  const int fd = open(path.c_str(), kOpenToInspect);
  ASSERT_GE(fd, 0);
  struct stat st;
  EXPECT_TRUE(RequireRegularFile(fd, path, &st).ok());
  EXPECT_EQ(st.st_size, 5);
  EXPECT_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  close(fd);
}

}  // namespace
}  // namespace dtrain
