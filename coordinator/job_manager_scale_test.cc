// The coordinator at the size of its scale target, without gRPC: 50,000 registered workers and a
// 4,096-rank job. Prints the times (docs/PERFORMANCE.md "Coordinator at 50,000 workers" has
// the figures); asserts what the scale changes, not a time: one scheduler pass places the job,
// each rank's heartbeat answer holds its own part (at most 9 entries, under 1 KiB), and a
// heartbeat that carries no assignment does no work proportional to the job.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_harness.h"
#include "coordinator/test_util.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

// CPU time of the calling thread (the load of a shared machine shows in wall time, less here).
double ThreadCpuMs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

TEST(JobManagerScale, Places4096RanksOver50000WorkersAndSendsEachRankItsPart) {
  Harness h(TempDb("scale"), [](JobManager::Options* o) { o->job_limits.max_workers = 4096; });
  absl::Time start = absl::Now();
  for (int i = 0; i < 50'000; ++i) {
    RegisterWorkerRequest r;
    r.set_worker_id(absl::StrFormat("w%05d", i));
    r.set_session_id("s");
    r.set_address(absl::StrFormat("10.%d.%d.%d:7071", i / 65536, i / 256 % 256, i % 256));
    r.set_host_label(absl::StrFormat("host%04d", i / 8));
    r.mutable_device()->set_kind("cpu");
    ASSERT_TRUE(h.m().RegisterWorker(r).ok());
  }
  std::printf("50,000 registrations: %.0f ms\n", absl::ToDoubleMilliseconds(absl::Now() - start));
  // 64 x 16 x 4 = 4,096 ranks, as tools/load/heartbeat_load submits it.
  start = absl::Now();
  const double submit_cpu0 = ThreadCpuMs();
  absl::StatusOr<Job> job = h.Submit(
      R"({"parallel": {"dp": 64, "pp": 16, "tp": 4}, "checkpoint": {"dir": "/c"},
          "dataset": "/d", "steps": 1000, "batch_size": 256, "device": "cpu",
          "model": {"vocab_size": 256, "context": 64, "n_layer": 32, "n_head": 16,
                    "n_embd": 256}})");
  ASSERT_TRUE(job.ok()) << job.status();
  std::printf("SubmitJob of the 4,096-rank job: %.1f ms, %.1f ms of CPU\n",
              absl::ToDoubleMilliseconds(absl::Now() - start), ThreadCpuMs() - submit_cpu0);
  start = absl::Now();
  const double cpu0 = ThreadCpuMs();
  h.m().RunSchedulerPass();  // on this thread: its CPU time is this thread's
  const double pass_cpu_ms = ThreadCpuMs() - cpu0;
  const double pass_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  Job placed = h.Get(job->id());
  ASSERT_EQ(placed.state(), PLACING);
  ASSERT_EQ(placed.placement().ranks_size(), 4096);
  std::printf(
      "scheduler pass placing 4,096 ranks over 50,000 workers (SQLite commit included): "
      "%.1f ms, %.1f ms of CPU\n",
      pass_ms, pass_cpu_ms);

  start = absl::Now();
  size_t largest = 0;
  for (const RankAssignment& rank : placed.placement().ranks()) {
    HeartbeatRequest beat;
    beat.set_worker_id(rank.worker_id());
    beat.set_session_id("s");
    absl::StatusOr<HeartbeatResponse> hb = h.m().Heartbeat(beat);
    ASSERT_TRUE(hb.ok());
    ASSERT_TRUE(hb->has_assignment()) << rank.worker_id();
    EXPECT_LE(hb->assignment().placement().ranks_size(), 9);
    largest = std::max(largest, hb->assignment().ByteSizeLong());
  }
  const double deliver_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  EXPECT_LE(largest, 1024u);
  std::printf(
      "4,096 heartbeats delivering the assignments: %.1f ms (%.1f us each); the largest "
      "%zu bytes\n",
      deliver_ms, 1000 * deliver_ms / 4096, largest);
}

}  // namespace
}  // namespace dtrain::coordinator
