// Text formatting for the dtrain CLI: progress lines, ETAs, tables. Pure functions of their
// arguments (the current time is a parameter), so they are unit-tested without a coordinator.
//
//   ProgressLine(job, eta)  -> "job-000003 RUNNING step 40/200 loss 2.9312 4,120 tok/s ETA 0:42"
//   FormatEta(42.0)         -> "0:42"
//   FormatThousands(4120)   -> "4,120"
#ifndef DTRAIN_CLIENT_FORMAT_H_
#define DTRAIN_CLIENT_FORMAT_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace dtrain {
namespace client {

// "QUEUED", "RUNNING", ...; "UNKNOWN(7)" for values this build does not know.
std::string JobStateName(JobState state);
std::string WorkerStateName(WorkerState state);
// SUCCEEDED, FAILED or CANCELLED.
bool IsFinalState(JobState state);

// 4120 -> "4,120"; -1234567 -> "-1,234,567".
std::string FormatThousands(int64_t value);

// Seconds -> "m:ss" under an hour, "h:mm:ss" above; "--:--" for unknown (negative, NaN, inf).
// Rounded to the nearest second: 41.6 -> "0:42".
std::string FormatEta(double seconds);

// A length of time, short: "0.4s", "12s", "3m05s", "2h10m", "3d" (negative counts as 0).
std::string FormatSpan(absl::Duration span);

// How long ago, short (FormatSpan of now - then); "never" for a zero time.
std::string FormatAge(absl::Time then, absl::Time now);

// A point in time in the local zone: "14:03:27" on the day of `now`, else "2024-05-01 14:03";
// "-" for a zero time.
std::string FormatClock(absl::Time when, absl::Time now);

// A time from the coordinator (ms since the Unix epoch; 0 = never) as an absl::Time.
absl::Time FromUnixMs(int64_t unix_ms);

// How long the job ran: ended - started, or now - started while it runs; "-" before it starts.
std::string JobDuration(const Job& job, absl::Time now);

// The job's reason, after its place in the queue when it is queued ("position 3 in the queue;
// waiting for 1 idle worker; ...").
std::string JobReason(const Job& job);

// A state and why, without saying the state twice: (QUEUED, "queued; placing it now") ->
// "QUEUED: placing it now"; (RUNNING, "") -> "RUNNING".
std::string StateText(JobState state, const std::string& reason);

// A loss with 4 decimals: "2.9312".
std::string FormatLoss(double loss);

// Tokens one training step processes: batch_size * seq_len (seq_len 0 means model.context).
int64_t TokensPerStep(const JobSpec& spec);

// Estimates seconds per step from the time stamps of the last steps reported (a sliding window),
// falling back to tokens/s when fewer than two steps are known. Replayed steps keep their
// original time stamps, so a watcher that reconnects estimates the same rate.
class StepRate {
 public:
  explicit StepRate(int window = 10) : window_(window) {}
  void Add(const StepMetrics& step);
  // Seconds per step; nullopt when nothing is known yet.
  std::optional<double> SecondsPerStep(const JobSpec& spec) const;
  // Seconds until `spec.steps`; nullopt when unknown.
  std::optional<double> EtaSeconds(const JobSpec& spec) const;

 private:
  struct Sample {
    int64_t step;
    int64_t time_unix_ms;
  };
  int window_;
  std::deque<Sample> samples_;
  double last_tokens_per_s_ = 0;
};

// The live line of `dtrain watch`:
//   RUNNING with a step: "job-000003 RUNNING step 40/200 loss 2.9312 4,120 tok/s ETA 0:42"
//   otherwise:           "job-000003 QUEUED: waiting for 2 idle workers (1 idle)"
std::string ProgressLine(const Job& job, std::optional<double> eta_seconds);

// A state change of a watched job: "job-000003 PLACING: 2 ranks on w1, w2".
std::string StateChangeLine(const std::string& job_id, const StateChange& change);

// The last line of `dtrain watch`:
//   "job-000003 SUCCEEDED: 60/60 steps, loss 5.5452 -> 2.4567, output /x/model.safetensors"
//   "job-000003 FAILED at step 23/60: worker w2 lost (no heartbeat for 3s); loss 5.5452 -> 3.2"
// `first_loss` is the loss of the first step the watcher saw, when it saw one.
std::string SummaryLine(const Job& job, std::optional<double> first_loss);

// Columns padded to their widest cell, separated by two spaces; no trailing spaces.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// "/srv/ckpt/job-000003 on hostA"; the path alone when the host is unknown.
std::string PathOnHost(const std::string& path, const std::string& host);

// The `stragglers:` line of `dtrain status` (Job.stragglers, scored by the coordinator):
// "1 flagged over steps 21-40 (threshold 1.5x, policy report): rank 1 (w2, dp0 pp1 tp0) 2.4x
// FLAGGED; rank 0 (w1, dp0 pp0 tp0) 0.4x"; the slowest 4 ranks, then how many more.
std::string StragglersText(const Job& job);

// One recovery of a job (Job.recoveries) for `dtrain status`: cause, new layout and workers,
// the checkpoint step resumed from, steps redone and the time of each phase.
std::string RecoveryText(const Recovery& recovery);

// `dtrain workers`: ID STATE DEVICE HOST JOB HEARTBEAT.
std::string WorkersTable(const ListWorkersResponse& workers, absl::Time now);
// `dtrain list`: ID STATE NAME STEP LOSS LAYOUT SUBMITTED STARTED ENDED DURATION REASON; the
// layout is the one the job runs on now ("dp=1 pp=2 tp=1 (shrunk)" after a shrink); the reason
// on one line (its lines joined with " | "), at most 120 characters: a longer one keeps its
// first 60 and its last 55 (where a path usually is) around " ... " (`status` shows it whole).
std::string JobsTable(const ListJobsResponse& jobs, absl::Time now);
// `dtrain status ID`: one "key: value" line per property (times, the layout it runs on now,
// checkpoint location and what a resume would redo, output with its host), then the placement
// and history.
std::string JobDetail(const Job& job, absl::Time now);

// `dtrain diagnose ID`: the summary, the other findings indented, then one row per rank with
// what it is doing now:
//   job-000003: root: rank 1 (w2, dp0 pp1 tp0) did not answer in 2s (process stopped or hung?
//   last heartbeat 3.1 s ago); rank 0 waits on its gradient
//     rank 1 on w2 (dp0 pp1 tp0) did not answer in 2s: process alive? last heartbeat 3.1 s ago
//   RANK  WORKER  LAYOUT       NOW
//   0     w1      dp0 pp0 tp0  waits for rank 1's gradient (step 12, micro-batch 3) for 4.2 s, ...
//   1     w2      dp0 pp1 tp0  did not answer (no answer by the deadline)
//   asked 2 ranks in 2.0 s; waits under 1.0 s are normal traffic
std::string DiagnosisText(const JobDiagnosis& diagnosis);

// `dtrain checkpoints ID`: where the job's checkpoints are, then one row per sealed step:
//   job-000003 checkpoints: /srv/ckpt/job-000003 on hostA, every 10 steps
//   STEP  SEALED    PATH
//   10    14:03:27  /srv/ckpt/job-000003/step_00000010
std::string CheckpointsText(const std::string& job_id, const ListCheckpointsResponse& response,
                            absl::Time now);

// One line of `dtrain logs`: "2024-05-01 14:03:27.120 rank 1 (w2) ERROR text", or
// "... coordinator INFO text" for the coordinator's own lines (rank -1).
std::string LogEntryLine(const LogEntry& entry);

// What Ctrl-C on a watch prints: "job-000012 keeps running; stop it with: dtrain cancel
// job-000012" (with --coordinator=ADDRESS when `coordinator` is not the default one, empty).
std::string KeepsRunningNote(const std::string& job_id, const std::string& coordinator);

// "dp=2 pp=1 tp=2"; the defaults (0 means 1) applied.
std::string LayoutString(const ParallelLayout& layout);
// A planned spec's device and matmul precision: "cuda, matmul bf16" (`dtrain plan`, `status`).
std::string DeviceAndPrecisionText(const JobSpec& spec);

// The layout the job runs on now (plan::JobCurrentLayout), for `dtrain status`:
//   "dp=2 pp=2 tp=1 (4 workers)", or after a recovery changed it
//   "dp=1 pp=2 tp=1 (2 workers; shrunk from dp=2 pp=2 tp=1 by recovery 1)".
std::string CurrentLayoutText(const Job& job);

// The layers of each pipeline stage of the job's current placement, for `dtrain status` (pp > 1
// and not interleaved; "" otherwise): "3,3,3 (the plan's balance)", "3,1,2 (parallel.
// stage_layers)", "4,1,4 (rebalanced by recovery 2)".
std::string StageCutText(const Job& job);

// The problems in an INVALID_ARGUMENT message, one per element: the coordinator lists them
// separated by newlines or "; " after an optional "invalid job spec:" style prefix.
std::vector<std::string> SplitProblems(const std::string& message);

// A message as one line of JSON (proto field names, defaults included, enums by name).
std::string ToJsonLine(const google::protobuf::Message& message);

// One line of `dtrain watch --json`: a compact object per update, without the job (and its spec)
// that every JobUpdate carries. The schema is a contract for scripts (client/README.md):
//   {"type":"step","job":"job-000003","step":12,"loss":2.9312,"grad_norm":0.81,"lr":0.0006,
//    "tokens_per_s":4120.5,"time_unix_ms":1714572207120}
//   {"type":"state","job":"job-000003","state":"RUNNING","reason":"worker w1 running",
//    "time_unix_ms":1714572207120}  (a final state adds "step", the last one, and "output")
//   {"type":"event","job":"job-000003","text":"worker w1 (dp0 pp0 tp0): loaded dataset ..."}
// Integers are JSON numbers (protobuf's mapping would quote 64-bit ones); a NaN or infinite
// number is null; an update with nothing in it is {"type":"job","job":"job-000003"}.
std::string WatchJsonLine(const JobUpdate& update);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_FORMAT_H_
