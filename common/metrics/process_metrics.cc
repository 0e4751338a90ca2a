#include "common/metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/version.h"

namespace dtrain::metrics {
namespace {

struct ProcStat {
  double cpu_seconds = 0;
  double threads = 0;
  double start_seconds_since_boot = 0;
  bool ok = false;
};

// /proc/self/stat: "pid (comm) state ppid ...": fields after the command, which may hold spaces
// and parentheses, so split after its last ')'. utime 14, stime 15, num_threads 20,
// starttime 22 (1-based, man proc), in clock ticks.
ProcStat ReadStat() {
  ProcStat s;
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return s;
  const std::vector<std::string> f =
      absl::StrSplit(text.substr(close + 2), ' ', absl::SkipEmpty());  // f[0] is field 3
  if (f.size() < 20) return s;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  s.cpu_seconds = (std::stod(f[14 - 3]) + std::stod(f[15 - 3])) / tick;
  s.threads = std::stod(f[20 - 3]);
  s.start_seconds_since_boot = std::stod(f[22 - 3]) / tick;
  s.ok = true;
  return s;
}

double BootTimeUnix() {
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
  }
  return 0;
}

double OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the directory's own descriptor
}

}  // namespace

absl::Status ExportProcessMetrics(Registry* registry) {
  ASSIGN_OR_RETURN(Family<Counter> * cpu,
                   registry->AddCounter("process_cpu_seconds_total",
                                        "user and system CPU time of this process, seconds"));
  ASSIGN_OR_RETURN(Family<Gauge> * resident,
                   registry->AddGauge("process_resident_memory_bytes",
                                      "resident memory of this process, bytes"));
  ASSIGN_OR_RETURN(Family<Gauge> * virt, registry->AddGauge("process_virtual_memory_bytes",
                                                            "virtual memory size, bytes"));
  ASSIGN_OR_RETURN(Family<Gauge> * fds,
                   registry->AddGauge("process_open_fds", "open file descriptors"));
  ASSIGN_OR_RETURN(Family<Gauge> * max_fds,
                   registry->AddGauge("process_max_fds", "the soft limit of open descriptors"));
  ASSIGN_OR_RETURN(Family<Gauge> * threads,
                   registry->AddGauge("process_threads", "threads of this process"));
  ASSIGN_OR_RETURN(Family<Gauge> * start,
                   registry->AddGauge("process_start_time_seconds",
                                      "start time of this process, seconds since the Unix epoch"));
  ASSIGN_OR_RETURN(Family<Gauge> * build,
                   registry->AddGauge("dtrain_build_info",
                                      "1; the labels say the dtrain version and the commit this "
                                      "binary was built from (--version)",
                                      {"version", "commit"}));
  build->Add({{"version", kVersion}, {"commit", BuildCommit()}}).Set(1);
  const double boot = BootTimeUnix();
  registry->AddCollectHook([cpu, resident, virt, fds, max_fds, threads, start, boot] {
    const ProcStat stat = ReadStat();
    if (stat.ok) {
      Counter& c = cpu->Add({});
      if (stat.cpu_seconds > c.Value()) c.Increment(stat.cpu_seconds - c.Value());
      threads->Add({}).Set(stat.threads);
      start->Add({}).Set(boot + stat.start_seconds_since_boot);
    }
    std::ifstream statm("/proc/self/statm");
    double size_pages = 0, resident_pages = 0;
    if (statm >> size_pages >> resident_pages) {
      const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
      virt->Add({}).Set(size_pages * page);
      resident->Add({}).Set(resident_pages * page);
    }
    fds->Add({}).Set(OpenFds());
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0)
      max_fds->Add({}).Set(static_cast<double>(limit.rlim_cur));
  });
  return absl::OkStatus();
}

}  // namespace dtrain::metrics
