#include "common/run_record.h"

#include <errno.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dtrain {

std::string RunRecordPath(const std::string& dir, const std::string& worker_id) {
  std::string name = worker_id;
  std::replace(name.begin(), name.end(), '/', '_');
  return absl::StrCat(dir, "/.worker-", name, ".run");
}

absl::Status WriteRunRecord(const std::string& path, const std::string& job_id, int rank,
                            const OomKillCount& oom) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << job_id << " " << rank << " " << oom.kills << " " << oom.file << "\n";
    out.flush();
    if (!out) {
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status RemoveRunRecord(const std::string& path) {
  if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::optional<PreviousRun> TakeRunRecord(const std::string& path, const OomKillCount& now) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  in.close();
  RemoveRunRecord(path).IgnoreError();  // reported once
  // "<job id> <rank> <kills> <file>"; the file may be empty.
  const std::vector<std::string> fields =
      absl::StrSplit(absl::StripTrailingAsciiWhitespace(line), absl::MaxSplits(' ', 3));
  PreviousRun run;
  int32_t rank = 0;
  int64_t kills = 0;
  if (fields.size() < 3 || fields[0].empty() || !absl::SimpleAtoi(fields[1], &rank) ||
      !absl::SimpleAtoi(fields[2], &kills)) {
    return std::nullopt;
  }
  run.set_job_id(fields[0]);
  run.set_rank(rank);
  const std::string file = fields.size() == 4 ? fields[3] : "";
  // Comparable only when read from the same counter.
  if (!file.empty() && file == now.file) {
    run.set_oom_kill_file(file);
    run.set_oom_kills_before(kills);
    run.set_oom_kills_after(now.kills);
  }
  return run;
}

bool KilledByOomKiller(const PreviousRun& run) {
  return !run.oom_kill_file().empty() && run.oom_kills_after() > run.oom_kills_before();
}

std::string DescribePreviousRun(const std::string& worker_id, const PreviousRun& run) {
  const std::string what = absl::StrCat("rank ", run.rank(), " of ", run.job_id());
  if (KilledByOomKiller(run)) {
    return absl::StrCat("worker ", worker_id,
                        " is back: its previous process was killed by the kernel's OOM killer "
                        "while it ran ",
                        what, " (oom_kill ", run.oom_kills_before(), " -> ", run.oom_kills_after(),
                        " in ", run.oom_kill_file(), ")");
  }
  const std::string prefix =
      absl::StrCat("worker ", worker_id, " is back: its previous process died while it ran ", what);
  if (run.oom_kill_file().empty()) {
    return absl::StrCat(prefix,
                        " (this host has no OOM-kill counter to tell whether the OOM killer did "
                        "it)");
  }
  return absl::StrCat(prefix, ", not by the OOM killer (oom_kill still ", run.oom_kills_after(),
                      " in ", run.oom_kill_file(), "): killed by a signal or crashed");
}

}  // namespace dtrain
