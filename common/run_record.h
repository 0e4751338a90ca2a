// The run record: how a worker that died while running a job is told apart from one the
// kernel's OOM killer killed, when it comes back.
//
// <data_root>/.worker-<worker id>.run holds, while a job runs on that worker process, the job,
// its rank and the kernel's OOM-kill count at the job's start (ReadOomKillCount):
//
//   job-000012 0 3 /sys/fs/cgroup/memory/dtrain/w1/memory.oom_control
//
// The process writes it when a job starts and removes it when the job ends there (whatever the
// outcome: the process saw it end). A new process of the worker (which proved the old one dead:
// worker/daemon/session_lock.h) that finds it knows its predecessor died running that job; it
// compares the count now with the recorded one and tells the coordinator at registration
// (RegisterWorkerRequest.previous_run), which records DescribePreviousRun in the job's log.
#ifndef DTRAIN_COMMON_RUN_RECORD_H_
#define DTRAIN_COMMON_RUN_RECORD_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/host_memory.h"
#include "proto/coordinator.pb.h"

namespace dtrain {

// <dir>/.worker-<worker id>.run ('/' in the id replaced, as session_lock.h does).
std::string RunRecordPath(const std::string& dir, const std::string& worker_id);

// Writes the record of `job_id` / `rank` started with `oom` (atomically: a temporary file
// renamed over it). The file's I/O error naming the path.
absl::Status WriteRunRecord(const std::string& path, const std::string& job_id, int rank,
                            const OomKillCount& oom);

// Removes the record; OK when there is none.
absl::Status RemoveRunRecord(const std::string& path);

// The record a dead predecessor left, with the count `now` (nullopt when there is none or it
// is unreadable: nothing to report), and removes it.
std::optional<PreviousRun> TakeRunRecord(const std::string& path, const OomKillCount& now);

// True when the OOM-kill count grew while the job ran.
bool KilledByOomKiller(const PreviousRun& run);

// One line for the job's log and the worker's:
//   "worker w1 is back: its previous process was killed by the kernel's OOM killer while it
//    ran rank 0 of job-000012 (oom_kill 3 -> 4 in /sys/fs/cgroup/.../memory.oom_control)"
//   "worker w1 is back: its previous process died while it ran rank 0 of job-000012, not by
//    the OOM killer (oom_kill still 3 in ...): killed by a signal or crashed"
//   "... (this host has no OOM-kill counter to tell whether the OOM killer did it)"
std::string DescribePreviousRun(const std::string& worker_id, const PreviousRun& run);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_RUN_RECORD_H_
