// The job plan: ONE pure function from a JobSpec to everything every part of dtrain derives
// from it (proto/plan.proto JobPlan): the spec with every default filled in, the layout, the
// micro-batches per replica, the schedule checked and simulated (a deadlock is an error), the
// stage cuts, and each rank's memory. The coordinator's SubmitJob and placement, `dtrain plan`,
// `dtrain submit` (through SubmitJob) and dtrain-local use it and nothing else, so what one
// rejects every other rejects with the same words; a worker is sent its rank's part of the plan
// the coordinator made for the placement (plan/rank_plan.h RankPlan) and never plans.
//
//   ASSIGN_OR_RETURN(JobPlan plan, ParseJobPlanJson(json));   // or MakeJobPlan(spec)
//   plan.spec().parallel().schedule();                         // "1f1b" (defaulted)
//   plan.schedule();                                           // SCHEDULE_1F1B (spec_enums.h)
//   plan.stages(1).memory().total();                           // bytes per rank of stage 1
//
// Defaults: parallel.dp/pp/tp 0 -> 1, parallel.schedule "" -> "1f1b", parallel.virtual_stages
// 0 -> 1, parallel.bucket_bytes 0 -> 25 MiB, micro_batch_size 0 -> batch_size / dp, seq_len 0
// -> model.context, device "" -> "auto", seed 0 -> 1337, and each unset optional optimizer
// field -> max_lr 6e-4, min_lr_ratio 0.1, weight_decay 0.1, beta1 0.9, beta2 0.95, eps 1e-8,
// grad_clip 1.0 (worker/model/optimizer.h's OptimizerConfig, which the worker fills from them),
// fault_tolerance.max_restarts unset -> 3 (0 stays 0: fail fast), on_worker_loss "" -> "shrink",
// wait_for "" -> "60s", stragglers.threshold 0 -> 1.5, window_steps 0 -> 20, policy "" ->
// "report", checkpoint.* as plan/checkpoint_plan.h PlanCheckpoint says (every job checkpoints
// every 100 steps by default), eval.batches 0 -> 1 (with an eval section).
//
// Errors: one InvalidArgument "invalid job spec: <problem>; <problem>; ..." listing every
// problem at once, each naming its JSON field:
//   "steps=0 must be positive; parallel.tp=3 does not divide model.n_head=4"
// Bounded: every size is capped (the k* constants below) before anything proportional to it
// is built, so any spec is answered in milliseconds (the schedule simulated is at most
// kMaxScheduleForwards forwards).
#ifndef DTRAIN_PLAN_JOB_PLAN_H_
#define DTRAIN_PLAN_JOB_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "plan/checkpoint_plan.h"
#include "plan/format_bytes.h"
#include "plan/schedule.h"
#include "plan/simulate.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace dtrain::plan {

// Caps, so a typo cannot queue a job no cluster runs nor keep a planner busy.
inline constexpr int64_t kMaxWorkersPerJob = 65536;       // parallel.dp*pp*tp
inline constexpr int64_t kMaxSteps = 1'000'000'000;       // steps
inline constexpr int64_t kMaxBatchSize = 1 << 20;         // batch_size (sequences per step)
inline constexpr int64_t kMaxMicroBatches = 4096;         // per replica per step
inline constexpr int64_t kMaxScheduleForwards = 1 << 18;  // micro-batches * pp * virtual_stages
inline constexpr int64_t kMaxVocabSize = 1 << 24;         // token ids are int32 / uint16 files
inline constexpr int64_t kMaxContext = 1 << 20;
inline constexpr int64_t kMaxLayers = 4096;
inline constexpr int64_t kMaxEmbd = 1 << 16;
inline constexpr int64_t kMaxMicroBatchTokens = 1 << 24;  // micro_batch_size * seq_len
// optimizer.lr and max_lr: AdamW moves every weight by about the rate each step, so a rate above
// this diverges in a step or two (a NaN loss at step 2, found by tools/fuzz_submit.py).
inline constexpr double kMaxLearningRate = 10;
inline constexpr int64_t kMaxEvalBatches = 10000;  // eval.batches per evaluation

// What one coordinator's operator lets a job ask for (dtrain-coordinator's --max_job_* flags),
// within the caps above that bound what any coordinator accepts. The defaults let any job of
// this project's examples and tests through and stop a typo or a hostile spec from queueing a
// job that occupies the cluster for years or a model no worker holds.
struct JobLimits {
  int64_t max_parameters = 20'000'000'000;  // --max_job_parameters: the model's (ModelParameters)
  int64_t max_steps = 10'000'000;           // --max_job_steps
  int64_t max_workers = 1024;               // --max_job_workers: parallel.dp*pp*tp
};

// The parameters (floats) of the whole model: every layer, the embeddings, the final LayerNorm
// (the head is tied to wte).
int64_t ModelParameters(const ModelConfig& model);

// InvalidArgument "invalid job spec: ..." naming every cap a planned spec (MakeJobPlan's output)
// exceeds, with its value and flag: "steps=20000000 exceeds this coordinator's cap of 10000000
// (--max_job_steps)".
absl::Status CheckJobLimits(const JobSpec& planned, const JobLimits& limits);

// The plan of `spec` (see the top). Idempotent: MakeJobPlan(plan.spec()) gives the same plan.
absl::StatusOr<JobPlan> MakeJobPlan(JobSpec spec);

// ReadJobSpecJson (spec_json.h) then MakeJobPlan, with one error listing the unknown fields and
// every other problem together (only malformed JSON or a value of the wrong type stops the
// checks early). What SubmitJob and `dtrain plan` use.
absl::StatusOr<JobPlan> ParseJobPlanJson(absl::string_view json);

// fault_tolerance.wait_for of a planned spec (MakeJobPlan's output) as a duration.
absl::Duration RecoveryWaitFor(const JobSpec& planned);

// The recovery rule "shrink" (FaultTolerance): the plan of `planned` (a planned spec) on fewer
// workers, at most `workers`: the largest dp below the spec's with dp*pp*tp <= workers whose
// plan is valid (same batch_size and micro_batch_size: more micro-batches per replica, so a
// step trains on the same sequences); when not even one replica fits, one replica (dp=1) of
// another pp x tp that does: the most workers, then the widest tp, then the most stages (the
// checkpoint loads on any layout). ResourceExhausted naming why when none does.
absl::StatusOr<JobPlan> ShrinkPlan(const JobSpec& planned, int64_t workers);

// The pipeline schedule of a plan (p = pp, m = micro_batches, v).
pipeline::ScheduleSpec ScheduleOf(const JobPlan& plan);

// The simulator's costs per stage: per micro-batch through one chunk of stage s with cost c
// (StagePlan.cost / v, in transformer-block forwards): F = c, and the backward 2c, split as
// B = c, W = c for zb-h1 and fused as one B of 2c otherwise. No p2p latency.
std::vector<pipeline::StageCosts> SimulationCosts(const JobPlan& plan);

// One step of the plan's schedule simulated (what MakeJobPlan checked); `actions` replaces the
// schedule's per-stage lists when not empty (tests: a list that deadlocks).
// FailedPrecondition "deadlock: ..." from the simulator.
absl::StatusOr<pipeline::SimResult> SimulatePlan(
    const JobPlan& plan, const std::vector<std::vector<pipeline::Action>>& actions = {});

// The layers of chunk j of stage s.
const LayerRange& ChunkOf(const JobPlan& plan, int stage, int chunk);

// How many plans MakeJobPlan and ParseJobPlanJson made in this process (ShrinkPlan's tries
// included), for the tests that count them: the coordinator plans once per placement, a worker
// never.
int64_t PlansMadeForTesting();

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_JOB_PLAN_H_
