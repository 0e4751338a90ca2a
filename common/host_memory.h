// What memory a process on this host may use, and which host it is: the facts a CPU worker
// reports at registration so that the coordinator never places more on a host than it has.
//
//   ASSIGN_OR_RETURN(HostMemory host, ReadHostMemory());
//   host.host_id          "3f2a...:9c41..."  (/etc/machine-id ":" the boot id)
//   host.total_bytes      MemTotal of /proc/meminfo
//   host.cgroup_limit_bytes  memory.max (v2) or memory.limit_in_bytes (v1) of this process's
//                         cgroup, 0 when unlimited or unknown
//   host.UsableBytes()    the smaller of the two (the most this process can hold before the
//                         kernel's OOM killer acts)
//
// `root` is prepended to every path ("/" in production; a test directory in tests).
#ifndef DTRAIN_COMMON_HOST_MEMORY_H_
#define DTRAIN_COMMON_HOST_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain {

struct HostMemory {
  std::string host_id;             // empty when neither id file exists
  int64_t total_bytes = 0;         // MemTotal
  int64_t cgroup_limit_bytes = 0;  // 0: no limit found
  int64_t UsableBytes() const;
};

// Reads /proc/meminfo, /proc/self/cgroup with the cgroup's limit file, /etc/machine-id and
// /proc/sys/kernel/random/boot_id under `root`. FailedPrecondition when /proc/meminfo has no
// MemTotal; a missing cgroup or id file only leaves its field empty.
absl::StatusOr<HostMemory> ReadHostMemory(const std::string& root = "/");

// The kernel's count of processes its OOM killer killed in this process's memory cgroup (and
// below it): "oom_kill N" of memory.events (v2) or memory.oom_control (v1, kernel 4.13+), or,
// when this process has no memory cgroup file to read, of /proc/vmstat (the whole host).
struct OomKillCount {
  std::string file;  // the file read, without `root`; "" when none had the counter
  int64_t kills = 0;
};
OomKillCount ReadOomKillCount(const std::string& root = "/");

// This process's resident memory that the kernel cannot drop, in bytes: RssAnon + RssShmem of
// /proc/self/status, i.e. VmRSS without RssFile. A mapped dataset's pages (MappedFile) and the
// binaries' own are file pages, reclaimed under pressure and shared with other processes, so a
// budget check counting them would fail a job over a cache.
absl::StatusOr<int64_t> ResidentBytes();

// "3GiB", "512MiB", "2G", "1.5GiB", "4096" (bytes): powers of 1024 for K/M/G/T with or without
// "iB"/"B". InvalidArgument naming the text for anything else, zero or negative.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_HOST_MEMORY_H_
