#include "plan/spec_paths.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::plan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

JobSpec SpecWith(const std::string& dataset, const std::string& checkpoint_dir = "") {
  JobSpec spec;
  spec.set_dataset(dataset);
  spec.mutable_checkpoint()->set_dir(checkpoint_dir);
  return spec;
}

TEST(SpecPaths, EveryPathFieldSetInOrder) {
  JobSpec spec = SpecWith("data/demo.txt", "/ckpt");
  spec.set_init_checkpoint("/w/gpt2.safetensors");
  spec.set_resume_from("/ckpt/job-000001");
  std::vector<std::string> fields;
  for (const SpecPath& p : SpecPaths(spec)) fields.push_back(p.field + "=" + p.path);
  EXPECT_THAT(fields,
              ::testing::ElementsAre("dataset=data/demo.txt", "init_checkpoint=/w/gpt2.safetensors",
                                     "resume_from=/ckpt/job-000001", "checkpoint.dir=/ckpt"));
}

TEST(SpecPaths, ResumeFromAJobIdIsNotAPath) {
  JobSpec spec = SpecWith("d.txt");
  spec.set_resume_from("job-000012");
  ASSERT_EQ(SpecPaths(spec).size(), 1u);
  EXPECT_EQ(SpecPaths(spec)[0].field, "dataset");
}

TEST(CheckSpecPaths, NoWorkerRegisteredOnlyTheDotDotRule) {
  EXPECT_TRUE(CheckSpecPaths(SpecWith("/etc/passwd"), {}).ok());
  const absl::Status s = CheckSpecPaths(SpecWith("../../etc/passwd"), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("invalid job spec: dataset ../../etc/passwd climbs above"));
}

TEST(CheckSpecPaths, AbsolutePathOutsideEveryWorkersRootsIsRefused) {
  const std::vector<WorkerRoots> workers = {{"w1", {"/var/lib/dtrain", "/datasets"}},
                                            {"w2", {"/var/lib/dtrain", "/datasets"}},
                                            {"w3", {"/srv/w3"}}};
  const absl::Status s = CheckSpecPaths(SpecWith("/etc/passwd", "/tmp/elsewhere"), workers);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "invalid job spec: dataset /etc/passwd is outside the allowed roots of every "
            "registered worker (w1, w2: /var/lib/dtrain, /datasets; w3: /srv/w3): set "
            "--allowed_paths on the workers to allow it; checkpoint.dir /tmp/elsewhere is "
            "outside the allowed roots of every registered worker (w1, w2: /var/lib/dtrain, "
            "/datasets; w3: /srv/w3): set --allowed_paths on the workers to allow it");
  // Inside every worker's roots passes; '..' is normalized first; the prefix trick is not.
  const std::vector<WorkerRoots> alike = {{"w1", {"/var/lib/dtrain", "/datasets"}},
                                          {"w2", {"/datasets"}}};
  EXPECT_TRUE(CheckSpecPaths(SpecWith("/datasets/d.bin", "/datasets/ckpt"), alike).ok());
  EXPECT_FALSE(CheckSpecPaths(SpecWith("/datasets/../etc/passwd"), alike).ok());
  EXPECT_FALSE(CheckSpecPaths(SpecWith("/datasets2/x.bin"), alike).ok());
}

TEST(CheckSpecPaths, AWorkerClaimingTheWholeFilesystemWidensNothing) {
  // A fake worker registered with allowed_roots ["/"]: the others still refuse /etc/shadow.
  const std::vector<WorkerRoots> workers = {{"w1", {"/datasets"}}, {"fake", {"/"}}};
  const absl::Status s = CheckSpecPaths(SpecWith("/etc/shadow"), workers);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "invalid job spec: dataset /etc/shadow is outside the allowed roots of worker w1: "
            "/datasets, which the job may be placed on: every such worker must allow it (set "
            "--allowed_paths on the workers to allow it)");
  EXPECT_TRUE(CheckSpecPaths(SpecWith("/datasets/d.bin"), workers).ok());
}

TEST(CheckSpecPaths, RelativePathsAndWorkersWithoutRootsAreLeftToTheWorker) {
  EXPECT_TRUE(CheckSpecPaths(SpecWith("data/demo.txt", "ckpt"), {{"w1", {"/srv"}}}).ok());
  EXPECT_TRUE(CheckSpecPaths(SpecWith("/etc/passwd"), {{"old", {}}}).ok());
  EXPECT_THAT(CheckSpecPaths(SpecWith("/etc/passwd"), {{"old", {}}, {"w1", {"/srv"}}}).message(),
              Not(HasSubstr("old")));
}

}  // namespace
}  // namespace dtrain::plan
