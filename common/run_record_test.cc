#include "common/run_record.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace {

using ::testing::HasSubstr;

std::string Path(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/run_record_" + name;
  std::filesystem::create_directories(dir);
  return RunRecordPath(dir, "w/1");
}

TEST(RunRecord, NoneLeftIsNothingToReport) {
  const std::string path = Path("none");
  EXPECT_FALSE(TakeRunRecord(path, {"/proc/vmstat", 1}).has_value());
  EXPECT_TRUE(RemoveRunRecord(path).ok()) << "removing a missing record is fine";
  EXPECT_THAT(path, HasSubstr("/.worker-w_1.run"));
}

TEST(RunRecord, AGrownCounterIsTheOomKillerAndTheRecordIsTakenOnce) {
  const std::string path = Path("oom");
  const OomKillCount before{"/sys/fs/cgroup/memory/x/memory.oom_control", 3};
  ASSERT_TRUE(WriteRunRecord(path, "job-000012", 2, before).ok());
  std::optional<PreviousRun> run = TakeRunRecord(path, {before.file, 4});
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->job_id(), "job-000012");
  EXPECT_EQ(run->rank(), 2);
  EXPECT_TRUE(KilledByOomKiller(*run));
  EXPECT_EQ(DescribePreviousRun("w1", *run),
            "worker w1 is back: its previous process was killed by the kernel's OOM killer while "
            "it ran rank 2 of job-000012 (oom_kill 3 -> 4 in "
            "/sys/fs/cgroup/memory/x/memory.oom_control)");
  EXPECT_FALSE(TakeRunRecord(path, {before.file, 4}).has_value()) << "reported once";
}

TEST(RunRecord, AnUnchangedCounterIsNotTheOomKiller) {
  const std::string path = Path("kill");
  ASSERT_TRUE(WriteRunRecord(path, "job-000001", 0, {"/proc/vmstat", 7}).ok());
  std::optional<PreviousRun> run = TakeRunRecord(path, {"/proc/vmstat", 7});
  ASSERT_TRUE(run.has_value());
  EXPECT_FALSE(KilledByOomKiller(*run));
  EXPECT_THAT(DescribePreviousRun("w1", *run),
              HasSubstr("died while it ran rank 0 of job-000001, not by the OOM killer "
                        "(oom_kill still 7 in /proc/vmstat)"));
}

TEST(RunRecord, CountsFromDifferentCountersAreNotCompared) {
  const std::string path = Path("moved");
  ASSERT_TRUE(WriteRunRecord(path, "job-000001", 0, {"/proc/vmstat", 7}).ok());
  std::optional<PreviousRun> run =
      TakeRunRecord(path, {"/sys/fs/cgroup/memory/y/memory.oom_control", 9});
  ASSERT_TRUE(run.has_value());
  EXPECT_FALSE(KilledByOomKiller(*run));
  EXPECT_THAT(DescribePreviousRun("w1", *run), HasSubstr("no OOM-kill counter"));

  ASSERT_TRUE(WriteRunRecord(path, "job-000001", 0, {}).ok());  // no counter at the start
  run = TakeRunRecord(path, {});
  ASSERT_TRUE(run.has_value());
  EXPECT_THAT(DescribePreviousRun("w1", *run), HasSubstr("no OOM-kill counter"));
}

TEST(RunRecord, GarbageIsNothingToReport) {
  const std::string path = Path("garbage");
  std::ofstream(path) << "\xff\xfe not a record\n";
  EXPECT_FALSE(TakeRunRecord(path, {}).has_value());
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace dtrain
