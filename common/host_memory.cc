#include "common/host_memory.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dtrain {
namespace {

// The file's contents, "" when it cannot be read.
std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The value in kB of `key` ("MemTotal:       24576000 kB") in a /proc status-style file, in
// bytes; -1 when absent.
int64_t KilobyteField(const std::string& text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    int64_t kb = 0;
    if (absl::SimpleAtoi(line, &kb)) return kb * 1024;
  }
  return -1;
}

// A limit file's value: "max" or a number at or above 2^62 (v1's "no limit") mean none (0).
int64_t LimitValue(const std::string& text) {
  const absl::string_view v = absl::StripAsciiWhitespace(text);
  int64_t bytes = 0;
  if (v == "max" || !absl::SimpleAtoi(v, &bytes) || bytes <= 0 || bytes >= (int64_t{1} << 62)) {
    return 0;
  }
  return bytes;
}

// This process's memory cgroups: the directory of each (under `root`) and whether it is v2.
// /proc/self/cgroup lines: "0::/path" (v2) or "N:memory:/path" (v1, also "N:cpu,memory:/path").
struct MemoryCgroup {
  std::string mount;  // root + "sys/fs/cgroup" (v2) or root + "sys/fs/cgroup/memory" (v1)
  std::string path;   // "/dtrain/w0"; "/" at the mount's root
  bool v2 = false;
  std::string Dir(absl::string_view p) const { return absl::StrCat(mount, p == "/" ? "" : p); }
};
std::vector<MemoryCgroup> MemoryCgroups(const std::string& root) {
  std::vector<MemoryCgroup> groups;
  for (absl::string_view line : absl::StrSplit(Slurp(root + "proc/self/cgroup"), '\n')) {
    const std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    const bool v2 = parts[0] == "0" && parts[1].empty();
    const bool v1 = absl::StrContains(absl::StrCat(",", parts[1], ","), ",memory,");
    if (!v2 && !v1) continue;
    groups.push_back({root + (v2 ? "sys/fs/cgroup" : "sys/fs/cgroup/memory"), parts[2], v2});
  }
  return groups;
}

// The smallest limit of this process's cgroup and its ancestors up to the mount root (a parent's
// limit binds its children too).
int64_t CgroupLimit(const std::string& root) {
  int64_t limit = 0;
  const auto take = [&](int64_t v) {
    if (v > 0) limit = limit == 0 ? v : std::min(limit, v);
  };
  for (const MemoryCgroup& group : MemoryCgroups(root)) {
    const std::string file = group.v2 ? "memory.max" : "memory.limit_in_bytes";
    std::string path = group.path;
    while (true) {
      take(LimitValue(Slurp(absl::StrCat(group.Dir(path), "/", file))));
      if (path.empty() || path == "/") break;
      path = path.substr(0, path.rfind('/'));
      if (path.empty()) path = "/";
    }
  }
  return limit;
}

// The value of `key` in a "key value" per line file (memory.events, vmstat); -1 when absent.
int64_t KeyedValue(const std::string& text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, " ")) continue;
    int64_t value = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value)) return value;
  }
  return -1;
}

}  // namespace

OomKillCount ReadOomKillCount(const std::string& root_in) {
  const std::string root = absl::EndsWith(root_in, "/") ? root_in : root_in + "/";
  for (const MemoryCgroup& group : MemoryCgroups(root)) {
    const std::string file =
        absl::StrCat(group.Dir(group.path), group.v2 ? "/memory.events" : "/memory.oom_control");
    const int64_t kills = KeyedValue(Slurp(file), "oom_kill");
    if (kills >= 0) return {file.substr(root.size() - 1), kills};
  }
  const int64_t kills = KeyedValue(Slurp(root + "proc/vmstat"), "oom_kill");
  if (kills >= 0) return {"/proc/vmstat", kills};
  return {};
}

int64_t HostMemory::UsableBytes() const {
  return cgroup_limit_bytes > 0 ? std::min(total_bytes, cgroup_limit_bytes) : total_bytes;
}

absl::StatusOr<HostMemory> ReadHostMemory(const std::string& root_in) {
  const std::string root = absl::EndsWith(root_in, "/") ? root_in : root_in + "/";
  HostMemory host;
  host.total_bytes = KilobyteField(Slurp(root + "proc/meminfo"), "MemTotal");
  if (host.total_bytes <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read MemTotal from ", root, "proc/meminfo"));
  }
  host.cgroup_limit_bytes = CgroupLimit(root);
  const std::string machine(absl::StripAsciiWhitespace(Slurp(root + "etc/machine-id")));
  const std::string boot(
      absl::StripAsciiWhitespace(Slurp(root + "proc/sys/kernel/random/boot_id")));
  if (!machine.empty() || !boot.empty()) host.host_id = absl::StrCat(machine, ":", boot);
  return host;
}

absl::StatusOr<int64_t> ResidentBytes() {
  const std::string status = Slurp("/proc/self/status");
  const int64_t anon = KilobyteField(status, "RssAnon");
  const int64_t shmem = KilobyteField(status, "RssShmem");
  if (anon < 0 || shmem < 0) {
    return absl::FailedPreconditionError("cannot read RssAnon and RssShmem from /proc/self/status");
  }
  return anon + shmem;
}

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  double scale = 1;
  constexpr struct {
    const char* suffix;
    double scale;
  } kUnits[] = {{"TiB", 1024.0 * 1024 * 1024 * 1024},
                {"GiB", 1024.0 * 1024 * 1024},
                {"MiB", 1024.0 * 1024},
                {"KiB", 1024.0},
                {"TB", 1024.0 * 1024 * 1024 * 1024},
                {"GB", 1024.0 * 1024 * 1024},
                {"MB", 1024.0 * 1024},
                {"KB", 1024.0},
                {"T", 1024.0 * 1024 * 1024 * 1024},
                {"G", 1024.0 * 1024 * 1024},
                {"M", 1024.0 * 1024},
                {"K", 1024.0},
                {"B", 1.0}};
  for (const auto& unit : kUnits) {
    if (absl::ConsumeSuffix(&s, unit.suffix)) {
      scale = unit.scale;
      break;
    }
  }
  double value = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(s), &value) || !std::isfinite(value) ||
      value * scale < 1 || value * scale >= 9.2e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text, "\" is not a positive size (bytes, or with K, M, G, T or KiB, MiB, GiB, TiB)"));
  }
  return static_cast<int64_t>(value * scale);
}

}  // namespace dtrain
