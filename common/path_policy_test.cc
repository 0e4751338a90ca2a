#include "common/path_policy.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh directory, resolved (TEST_TMPDIR may itself be behind a symlink).
std::string TempDir() {
  std::string templ =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/path_policy_XXXXXX";
  char resolved[PATH_MAX];
  return realpath(mkdtemp(templ.data()), resolved);
}

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(IsInsideRoot, ComponentByComponent) {
  EXPECT_TRUE(IsInsideRoot("/data", "/data"));
  EXPECT_TRUE(IsInsideRoot("/data/x/y", "/data"));
  EXPECT_TRUE(IsInsideRoot("/data/x", "/data/"));
  EXPECT_FALSE(IsInsideRoot("/data2", "/data"));  // the prefix trick
  EXPECT_FALSE(IsInsideRoot("/data2/x", "/data"));
  EXPECT_FALSE(IsInsideRoot("/dat", "/data"));
  EXPECT_FALSE(IsInsideRoot("/etc/passwd", "/data"));
  EXPECT_TRUE(IsInsideRoot("/etc/passwd", "/"));
}

TEST(SplitPathList, CommaSeparatedEmptiesSkipped) {
  EXPECT_THAT(SplitPathList("/datasets,/shared/ckpt"), ElementsAre("/datasets", "/shared/ckpt"));
  EXPECT_THAT(SplitPathList(" /a , ,/b,"), ElementsAre("/a", "/b"));
  EXPECT_TRUE(SplitPathList("").empty());
}

TEST(ResolveRoots, RealpathsAndDropsDuplicates) {
  const std::string dir = TempDir();
  ASSERT_EQ(mkdir((dir + "/a").c_str(), 0755), 0);
  ASSERT_EQ(symlink((dir + "/a").c_str(), (dir + "/link").c_str()), 0);
  absl::StatusOr<std::vector<std::string>> roots =
      ResolveRoots({dir + "/a/", dir + "/link", dir + "/a/../a"});
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_THAT(*roots, ElementsAre(dir + "/a"));
}

TEST(DeclaredRoots, ResolvedRootsThenTheSymlinkedFormsAsGiven) {
  const std::string dir = TempDir();
  ASSERT_EQ(mkdir((dir + "/a").c_str(), 0755), 0);
  ASSERT_EQ(symlink((dir + "/a").c_str(), (dir + "/link").c_str()), 0);
  const std::vector<std::string> given = {dir + "/a/", dir + "/link"};
  const std::vector<std::string> roots = ResolveRoots(given).value();
  EXPECT_THAT(DeclaredRoots(given, roots), ElementsAre(dir + "/a", dir + "/link"));
  EXPECT_THAT(DeclaredRoots({dir + "/a"}, {dir + "/a"}), ElementsAre(dir + "/a"));
}

TEST(ResolveRoots, MissingRootOrFileIsAnError) {
  const std::string dir = TempDir();
  absl::StatusOr<std::vector<std::string>> missing = ResolveRoots({dir + "/nope"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir + "/nope"));
  Touch(dir + "/file");
  absl::StatusOr<std::vector<std::string>> file = ResolveRoots({dir + "/file"});
  EXPECT_EQ(file.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(file.status().message(), HasSubstr("is not a directory"));
}

TEST(CheckPathShape, RelativePathsMayNotClimbOut) {
  EXPECT_TRUE(CheckPathShape("dataset", "").ok());
  EXPECT_TRUE(CheckPathShape("dataset", "data/demo.txt").ok());
  EXPECT_TRUE(CheckPathShape("dataset", "data/../other/demo.txt").ok());
  EXPECT_TRUE(CheckPathShape("dataset", "/abs/../x").ok());  // absolute: the roots decide
  const absl::Status up = CheckPathShape("dataset", "../etc/passwd");
  EXPECT_EQ(up.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(up.message(), HasSubstr("dataset ../etc/passwd climbs above"));
  EXPECT_FALSE(CheckPathShape("checkpoint.dir", "a/../../b").ok());
}

TEST(IsInsideRootsLexically, NormalizesDotDot) {
  const std::vector<std::string> roots = {"/data", "/datasets"};
  EXPECT_TRUE(IsInsideRootsLexically("/data/x", roots));
  EXPECT_TRUE(IsInsideRootsLexically("/datasets", roots));
  EXPECT_FALSE(IsInsideRootsLexically("/data/../etc/passwd", roots));
  EXPECT_FALSE(IsInsideRootsLexically("/data2/x", roots));
  EXPECT_FALSE(IsInsideRootsLexically("/etc/passwd", roots));
}

TEST(CheckPathResolved, InsideARootIncludingNotYetExisting) {
  const std::string root = TempDir();
  Touch(root + "/data.txt");
  const std::vector<std::string> roots = {root};
  EXPECT_TRUE(CheckPathResolved("dataset", "", roots).ok());
  EXPECT_TRUE(CheckPathResolved("dataset", root + "/data.txt", roots).ok());
  EXPECT_TRUE(CheckPathResolved("checkpoint.dir", root, roots).ok());  // the root itself
  EXPECT_TRUE(CheckPathResolved("checkpoint.dir", root + "/new/deeper/job-000001", roots).ok());
  EXPECT_TRUE(CheckPathResolved("dataset", root + "/x/../data.txt", roots).ok());
}

TEST(CheckPathResolved, OutsideNamesPathAndRoots) {
  const std::string root = TempDir();
  const absl::Status s = CheckPathResolved("dataset", "/etc/passwd", {root, "/datasets"});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), absl::StrCat("dataset /etc/passwd is outside this worker's allowed "
                                      "roots (",
                                      root,
                                      ", /datasets): set --allowed_paths on the worker to "
                                      "allow it"));
  EXPECT_FALSE(CheckPathResolved("dataset", root + "/../etc/passwd", {root}).ok());
  EXPECT_FALSE(CheckPathResolved("checkpoint.dir", root + "2/ckpt", {root}).ok());  // prefix
}

TEST(CheckPathResolved, SymlinkThatEscapesIsRefused) {
  const std::string root = TempDir();
  const std::string outside = TempDir();
  Touch(outside + "/secret.txt");
  ASSERT_EQ(symlink(outside.c_str(), (root + "/escape").c_str()), 0);
  const absl::Status file = CheckPathResolved("dataset", root + "/escape/secret.txt", {root});
  EXPECT_EQ(file.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(file.message(), HasSubstr("dataset " + root + "/escape/secret.txt resolves to " +
                                        outside + "/secret.txt, which is outside"));
  // A directory that does not exist yet, below the escaping link.
  const absl::Status dir = CheckPathResolved("checkpoint.dir", root + "/escape/new/job", {root});
  EXPECT_THAT(dir.message(), HasSubstr("resolves to " + outside + "/new/job"));
  // A symlink that stays inside is fine.
  ASSERT_EQ(mkdir((root + "/real").c_str(), 0755), 0);
  ASSERT_EQ(symlink((root + "/real").c_str(), (root + "/inside").c_str()), 0);
  EXPECT_TRUE(CheckPathResolved("checkpoint.dir", root + "/inside/new", {root}).ok());
}

TEST(CheckPathResolved, DanglingSymlinkIsRefused) {
  const std::string root = TempDir();
  const std::string outside = TempDir();
  ASSERT_EQ(symlink((outside + "/not-yet").c_str(), (root + "/dangling").c_str()), 0);
  const absl::Status s = CheckPathResolved("checkpoint.dir", root + "/dangling/job", {root});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("goes through " + root + "/dangling, a symlink to a missing"));
}

TEST(CheckPathResolved, RelativePathsResolveFromTheWorkingDirectory) {
  const std::string root = TempDir();
  char cwd[PATH_MAX];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(root.c_str()), 0);
  EXPECT_TRUE(CheckPathResolved("dataset", "data/demo.txt", {root}).ok());
  const absl::Status s = CheckPathResolved("dataset", "../x.txt", {root});
  EXPECT_THAT(s.message(), HasSubstr("(relative, resolved from " + root));
  ASSERT_EQ(chdir(cwd), 0);
}

}  // namespace
}  // namespace dtrain
