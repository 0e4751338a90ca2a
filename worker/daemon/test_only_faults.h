// Test-only fault injection for the worker daemon: a rank that sleeps after every step, skips a
// collective, stalls in F or freezes before a seal, so that the tests of recovery, `dtrain
// diagnose` and stragglers can make a fault land at a known point of a real run.
//
// The production binary, //worker:dtrain-worker, links test_only_faults_off.cc: it has no
// --test_only_* flag and no way to be told to desynchronise a real job. The test binary,
// //worker:dtrain-worker-testing (the same daemon), links test_only_faults_flags.cc, which
// defines the flags below and applies them:
//   --test_only_step_delay=DURATION        sleep this long after every training step
//   --test_only_skip_collective=N          this rank's tp group (dp when tp=1) skips seq N
//   --test_only_forward_delay=STEP:DURATION  F of micro-batch 0 of STEP sleeps DURATION
//   --test_only_linger_after_job=DURATION  keep a finished job's peer service up this long
//   --test_only_stop_before_seal=N         rank 0 of a job's first run SIGSTOPs itself before
//                                          sealing step N
#ifndef DTRAIN_WORKER_DAEMON_TEST_ONLY_FAULTS_H_
#define DTRAIN_WORKER_DAEMON_TEST_ONLY_FAULTS_H_

#include "absl/status/status.h"
#include "worker/daemon/worker_daemon.h"

namespace dtrain::worker {

// Sets `options`' test-only faults (after_step, test_only, test_only_linger_after_job) from the
// --test_only_* flags of this binary; does nothing in dtrain-worker. InvalidArgument naming a
// malformed flag.
absl::Status ApplyTestOnlyFaultFlags(WorkerOptions& options);

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_TEST_ONLY_FAULTS_H_
