// dtrain-worker-testing: the --test_only_* flags (test_only_faults.h).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "worker/daemon/test_only_faults.h"

ABSL_FLAG(absl::Duration, test_only_step_delay, absl::ZeroDuration(),
          "test-only: sleep this long after every training step (fault tests that must act "
          "at a known point of a run); 0: no delay");
ABSL_FLAG(int64_t, test_only_skip_collective, -1,
          "test-only: in multi-worker jobs this rank's tensor-parallel group (data-parallel "
          "when tp=1) skips collective sequence number N, so its later collectives are one "
          "ahead of its partners' (a mismatched collective, for `dtrain diagnose`); -1: off");
ABSL_FLAG(absl::Duration, test_only_linger_after_job, absl::ZeroDuration(),
          "test-only: keep a finished job (a multi-worker rank's peer service up) this long "
          "after its last report was delivered before leaving it (the window in which another "
          "job's ranks could meet the old peer service, held open); 0: leave at once");
ABSL_FLAG(std::string, test_only_forward_delay, "",
          "test-only: STEP:DURATION, e.g. 3:8s: in multi-worker jobs, F of micro-batch 0 of "
          "step STEP sleeps DURATION once its input arrived (a rank stuck in compute, for "
          "`dtrain diagnose`); empty: off");

ABSL_FLAG(int64_t, test_only_stop_before_seal, 0,
          "test-only: in multi-worker jobs, rank 0 of the job's first run stops its own process "
          "(SIGSTOP) just before it seals checkpoint step N (a worker frozen in the middle of a "
          "checkpoint, for the tests of a frozen run); 0: off");

namespace dtrain::worker {

absl::Status ApplyTestOnlyFaultFlags(WorkerOptions& options) {
  if (const absl::Duration delay = absl::GetFlag(FLAGS_test_only_step_delay);
      delay > absl::ZeroDuration()) {
    options.after_step = [delay](int64_t) { absl::SleepFor(delay); };
  }
  options.test_only.skip_collective_seq = absl::GetFlag(FLAGS_test_only_skip_collective);
  options.test_only.stop_before_seal_step = absl::GetFlag(FLAGS_test_only_stop_before_seal);
  options.test_only_linger_after_job = absl::GetFlag(FLAGS_test_only_linger_after_job);
  if (const std::string delay = absl::GetFlag(FLAGS_test_only_forward_delay); !delay.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(delay, absl::MaxSplits(':', 1));
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &options.test_only.forward_delay_step) ||
        options.test_only.forward_delay_step < 1 ||
        !absl::ParseDuration(parts[1], &options.test_only.forward_delay)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--test_only_forward_delay=", delay, " must be STEP:DURATION, e.g. 3:8s (STEP >= 1)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::worker
