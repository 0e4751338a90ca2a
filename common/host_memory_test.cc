#include "common/host_memory.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace dtrain {
namespace {

class FakeRoot {
 public:
  FakeRoot() {
    dir_ = std::filesystem::path(testing::TempDir()) /
           testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    Write("proc/meminfo", "MemTotal:       24576000 kB\nMemFree:  1000 kB\n");
  }
  void Write(const std::string& path, const std::string& text) {
    const std::filesystem::path p = dir_ / path;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

TEST(ReadHostMemory, NoCgroupIsTheHostsMemory) {
  FakeRoot fs;
  absl::StatusOr<HostMemory> host = ReadHostMemory(fs.root());
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->total_bytes, int64_t{24576000} * 1024);
  EXPECT_EQ(host->cgroup_limit_bytes, 0);
  EXPECT_EQ(host->UsableBytes(), host->total_bytes);
  EXPECT_EQ(host->host_id, "");
}

TEST(ReadHostMemory, CgroupV2LimitOfTheProcessOrAnAncestorBinds) {
  FakeRoot fs;
  fs.Write("proc/self/cgroup", "0::/dtrain/w0\n");
  fs.Write("sys/fs/cgroup/memory.max", "max\n");
  fs.Write("sys/fs/cgroup/dtrain/memory.max", "4294967296\n");
  fs.Write("sys/fs/cgroup/dtrain/w0/memory.max", "3221225472\n");
  absl::StatusOr<HostMemory> host = ReadHostMemory(fs.root());
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->cgroup_limit_bytes, int64_t{3} << 30);
  EXPECT_EQ(host->UsableBytes(), int64_t{3} << 30);

  fs.Write("sys/fs/cgroup/dtrain/w0/memory.max", "max\n");
  host = ReadHostMemory(fs.root());
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->cgroup_limit_bytes, int64_t{4} << 30);  // the parent's
}

TEST(ReadHostMemory, CgroupV1LimitAndItsNoLimitValue) {
  FakeRoot fs;
  fs.Write("proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n");
  fs.Write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
  fs.Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  absl::StatusOr<HostMemory> host = ReadHostMemory(fs.root());
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->cgroup_limit_bytes, int64_t{2} << 30);
}

TEST(ReadHostMemory, LimitAboveTheHostIsTheHost) {
  FakeRoot fs;
  fs.Write("proc/self/cgroup", "0::/big\n");
  fs.Write("sys/fs/cgroup/big/memory.max", "1099511627776\n");
  absl::StatusOr<HostMemory> host = ReadHostMemory(fs.root());
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->UsableBytes(), host->total_bytes);
}

TEST(ReadHostMemory, HostIdIsMachineIdAndBootId) {
  FakeRoot fs;
  fs.Write("etc/machine-id", "abc123\n");
  fs.Write("proc/sys/kernel/random/boot_id", "b007\n");
  absl::StatusOr<HostMemory> host = ReadHostMemory(fs.root());
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->host_id, "abc123:b007");
}

TEST(ReadHostMemory, NoMemTotalIsFailedPrecondition) {
  FakeRoot fs;
  fs.Write("proc/meminfo", "MemFree: 3 kB\n");
  EXPECT_EQ(ReadHostMemory(fs.root()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ReadHostMemory, ThisMachine) {
  absl::StatusOr<HostMemory> host = ReadHostMemory();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_GT(host->UsableBytes(), int64_t{1} << 26);
  absl::StatusOr<int64_t> rss = ResidentBytes();
  ASSERT_TRUE(rss.ok()) << rss.status();
  EXPECT_GT(*rss, 0);
}

TEST(ReadOomKillCount, CgroupV2MemoryEventsThenV1OomControlThenVmstat) {
  FakeRoot fs;
  EXPECT_EQ(ReadOomKillCount(fs.root()).file, "") << "nothing to read";
  fs.Write("proc/vmstat", "pgfault 12\noom_kill 7\n");
  EXPECT_EQ(ReadOomKillCount(fs.root()).file, "/proc/vmstat");
  EXPECT_EQ(ReadOomKillCount(fs.root()).kills, 7);

  fs.Write("proc/self/cgroup", "4:memory:/docker/abc\n");
  fs.Write("sys/fs/cgroup/memory/docker/abc/memory.oom_control",
           "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  EXPECT_EQ(ReadOomKillCount(fs.root()).file,
            "/sys/fs/cgroup/memory/docker/abc/memory.oom_control");
  EXPECT_EQ(ReadOomKillCount(fs.root()).kills, 2);

  fs.Write("proc/self/cgroup", "0::/dtrain/w0\n");
  fs.Write("sys/fs/cgroup/dtrain/w0/memory.events",
           "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n");
  EXPECT_EQ(ReadOomKillCount(fs.root()).file, "/sys/fs/cgroup/dtrain/w0/memory.events");
  EXPECT_EQ(ReadOomKillCount(fs.root()).kills, 1) << "oom_kill, not oom or oom_group_kill";
}

TEST(ReadOomKillCount, ThisMachine) {
  const OomKillCount count = ReadOomKillCount();
  EXPECT_GE(count.kills, 0);
  std::printf("OOM kill counter here: %s = %lld\n", count.file.c_str(),
              static_cast<long long>(count.kills));
}

TEST(ParseByteSize, UnitsArePowersOf1024) {
  EXPECT_EQ(*ParseByteSize("3GiB"), int64_t{3} << 30);
  EXPECT_EQ(*ParseByteSize("3G"), int64_t{3} << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize("4096B"), 4096);
}

TEST(ParseByteSize, RejectsNonsenseNamingIt) {
  for (const char* bad : {"", "0", "-1G", "3 parsecs", "GiB", "nanG"}) {
    absl::StatusOr<int64_t> v = ParseByteSize(bad);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseByteSize("3 parsecs").status().message().find("\"3 parsecs\""), std::string::npos);
}

}  // namespace
}  // namespace dtrain
