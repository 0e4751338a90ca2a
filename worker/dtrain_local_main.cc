// dtrain-local: trains a GPT-2 model in one process on one device. For experiments and as the
// reference every distributed layout is checked against.
//
//   dtrain-local --data=shakespeare.txt --steps=200 --batch=8 --seq=128 --save=model.safetensors
//
//   dtrain-local --spec=job.json [--save=out.safetensors] [--resume=DIR] [--job_id=job-000000]
//
// Prints a progress line per step to stderr; --log_json writes one JSON object per step.
//
// --spec runs a service job spec (the file `dtrain submit` takes) in this process: parsed and
// planned by the coordinator's rules (plan/job_plan.h ParseJobPlanJson, once) and run as a
// worker runs a planned spec (worker/run_of_plan.h TrainingRunOf), so names and defaults are
// the service's. The run is
// job --job_id (default job-000000, an id no coordinator issues) and writes only in its
// directory, <checkpoint.dir>/<job id>/ (or <--data_root>/jobs/<job id>/), which must not hold
// an earlier run's files. A layout other than 1x1x1 runs on this one process: every layout
// trains to one worker's numbers. --save, --resume, --steps, --device and the run flags
// (--threads, --matmul_precision, --log_json, --dump_grads) override the spec; the other flags
// the spec sets (model, data, optimizer, batch, seq, seed, init, checkpoints) are refused.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "kernels/backend.h"
#include "kernels/op_timing_backend.h"
#include "plan/job_plan.h"
#include "plan/ranks.h"
#include "worker/local_trainer.h"
#include "worker/run_of_plan.h"

ABSL_FLAG(int, vocab_size, 256, "vocabulary size V (256 for byte-level text)");
ABSL_FLAG(int, context, 128, "maximum sequence length (rows of wpe)");
ABSL_FLAG(int, n_layer, 4, "transformer blocks L");
ABSL_FLAG(int, n_head, 4, "attention heads NH");
ABSL_FLAG(int, n_embd, 256, "model width C");
ABSL_FLAG(std::string, init, "", "GPT-2 safetensors to start from (default: GPT-2 init)");
ABSL_FLAG(std::string, data, "", "llm.c .bin token file, or any other file as bytes");
ABSL_FLAG(int64_t, steps, 10, "training steps");
ABSL_FLAG(int, batch, 8, "sequences per step B");
ABSL_FLAG(int, seq, 128, "tokens per sequence T (<= context)");
ABSL_FLAG(double, lr, 0.0, "constant learning rate; when unset, warmup + cosine from max_lr");
ABSL_FLAG(double, max_lr, 6e-4, "peak learning rate of the schedule");
ABSL_FLAG(double, min_lr_ratio, 0.1, "final learning rate as a fraction of max_lr");
ABSL_FLAG(int, warmup_steps, 0, "linear warmup steps");
ABSL_FLAG(double, weight_decay, 0.1, "AdamW decoupled weight decay (matrices and embeddings)");
ABSL_FLAG(double, beta1, 0.9, "AdamW beta1");
ABSL_FLAG(double, beta2, 0.95, "AdamW beta2");
ABSL_FLAG(double, eps, 1e-8, "AdamW epsilon");
ABSL_FLAG(double, grad_clip, 1.0, "max global gradient norm (0 disables)");
ABSL_FLAG(uint64_t, seed, 1337, "seed of the GPT-2 init");
ABSL_FLAG(std::string, device, "auto", "cpu, cuda, cuda:N, auto or cpu-staging (tests)");
ABSL_FLAG(int, threads, 0, "CPU threads (0 = all cores)");
ABSL_FLAG(std::string, matmul_precision, "fp32",
          "GEMM inputs: fp32, tf32 or bf16 (tf32 and bf16 need a CUDA device; fp32 accumulation); "
          "with --spec, overrides its matmul_precision");
ABSL_FLAG(std::string, save, "", "write the final weights here (GPT-2 safetensors)");
ABSL_FLAG(std::string, dump_grads, "", "write the first step's gradients here (safetensors)");
ABSL_FLAG(std::string, checkpoint_dir, "", "write training state (weights + AdamW) here");
ABSL_FLAG(int64_t, checkpoint_every, 0, "also checkpoint every N steps");
ABSL_FLAG(std::string, resume, "", "continue from this checkpoint dir (or one step_N dir)");
ABSL_FLAG(std::string, eval_data, "",
          "validation data (.bin or text): its mean loss over --eval_batches batches after every "
          "--eval_every steps and the last; with --steps=0, of the starting weights, once");
ABSL_FLAG(int64_t, eval_every, 0, "evaluate every N steps (0: only with --steps=0)");
ABSL_FLAG(int, eval_batches, 1, "validation batches (B x T each) per evaluation");
ABSL_FLAG(bool, op_profile, false,
          "time every backend op (synchronizing after each: a profiled step is slower) and print "
          "milliseconds per step by op and shape after the run, the first step left out");
ABSL_FLAG(std::string, log_json, "", "one JSON line per step to this file, or - for stdout");
ABSL_FLAG(std::string, spec, "",
          "run this job spec (JSON, as for `dtrain submit`) with the service's names and defaults");
ABSL_FLAG(std::string, job_id, "job-000000",
          "with --spec: the run's job id, naming its directory <checkpoint.dir>/<job id>/");
ABSL_FLAG(std::string, data_root, ".",
          "with --spec: a spec without checkpoint.dir writes to <data_root>/jobs/<job id>/");

namespace dtrain {
namespace {

TrainingRun OptionsFromFlags() {
  TrainingRun o;
  o.model.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  o.model.context = absl::GetFlag(FLAGS_context);
  o.model.n_layer = absl::GetFlag(FLAGS_n_layer);
  o.model.n_head = absl::GetFlag(FLAGS_n_head);
  o.model.n_embd = absl::GetFlag(FLAGS_n_embd);
  o.optimizer.lr = absl::GetFlag(FLAGS_lr);
  o.optimizer.max_lr = absl::GetFlag(FLAGS_max_lr);
  o.optimizer.min_lr_ratio = absl::GetFlag(FLAGS_min_lr_ratio);
  o.optimizer.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.optimizer.beta1 = absl::GetFlag(FLAGS_beta1);
  o.optimizer.beta2 = absl::GetFlag(FLAGS_beta2);
  o.optimizer.eps = absl::GetFlag(FLAGS_eps);
  o.optimizer.grad_clip = absl::GetFlag(FLAGS_grad_clip);
  o.data_path = absl::GetFlag(FLAGS_data);
  o.init_path = absl::GetFlag(FLAGS_init);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.seq = absl::GetFlag(FLAGS_seq);
  o.resume_from = absl::GetFlag(FLAGS_resume);
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.save_path = absl::GetFlag(FLAGS_save);
  o.dump_grads_path = absl::GetFlag(FLAGS_dump_grads);
  o.eval_data_path = absl::GetFlag(FLAGS_eval_data);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.eval_batches = absl::GetFlag(FLAGS_eval_batches);
  return o;
}

// A flag on the command line, even set to its default (`--steps=10` with a spec of 200 steps
// trains 10). Abseil declares the query in its internal parse header; it has no public one.
bool Given(absl::string_view flag) { return absl::flags_internal::WasPresentOnCommandLine(flag); }

// The claim uid of every dtrain-local run: a coordinator's job of the same id never matches it.
constexpr char kLocalUid[] = "dtrain-local";

// --spec: the options a worker would train the spec with, in the run's own job directory.
absl::StatusOr<TrainingRun> OptionsFromSpec(const std::string& path, std::string* device,
                                            kernels::MatmulPrecision* precision) {
  std::vector<std::string> refused;
  for (const char* flag : {"vocab_size",
                           "context",
                           "n_layer",
                           "n_head",
                           "n_embd",
                           "init",
                           "data",
                           "batch",
                           "seq",
                           "lr",
                           "max_lr",
                           "min_lr_ratio",
                           "warmup_steps",
                           "weight_decay",
                           "beta1",
                           "beta2",
                           "eps",
                           "grad_clip",
                           "seed",
                           "checkpoint_dir",
                           "checkpoint_every",
                           "eval_data",
                           "eval_every",
                           "eval_batches"}) {
    if (Given(flag)) refused.push_back(absl::StrCat("--", flag));
  }
  if (!refused.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::StrJoin(refused, ", "), " cannot be combined with --spec: the spec sets ",
        refused.size() == 1 ? "it" : "them", "; edit ", path));
  }
  absl::StatusOr<std::string> json = ReadFileToString(path);
  RETURN_IF_ERROR(Annotate(json.status(), "--spec"));
  absl::StatusOr<JobPlan> planned = plan::ParseJobPlanJson(*json);
  RETURN_IF_ERROR(Annotate(planned.status(), absl::StrCat("--spec=", path)));
  JobSpec* spec = planned->mutable_spec();
  const std::string job_id = absl::GetFlag(FLAGS_job_id);
  ASSIGN_OR_RETURN(const std::string job_dir,
                   worker::JobDir(job_id, *spec, absl::GetFlag(FLAGS_data_root)));
  // resume_from may name a job id, as for the service: that job's directory beside this one.
  if (IsJobId(spec->resume_from())) {
    spec->set_resume_from(JobDirectory(spec->checkpoint().dir(), spec->resume_from(),
                                       absl::GetFlag(FLAGS_data_root)));
  }
  if (Given("resume")) spec->set_resume_from(absl::GetFlag(FLAGS_resume));
  ASSIGN_OR_RETURN(TrainingRun o, worker::TrainingRunOf(*spec, job_dir));  // planned above
  if (Given("steps")) o.steps = absl::GetFlag(FLAGS_steps);  // as `dtrain resubmit --steps`
  if (Given("save")) o.save_path = AbsolutePath(absl::GetFlag(FLAGS_save));
  o.dump_grads_path = absl::GetFlag(FLAGS_dump_grads);
  *device =
      Given("device") || spec->device().empty() ? absl::GetFlag(FLAGS_device) : spec->device();
  *precision = worker::MatmulPrecisionOf(planned->matmul_precision());

  // The job directory is this run's alone: an earlier run's files are never overwritten.
  std::vector<std::string> earlier;
  for (const char* name : {kLatestFileName, kFinalWeightsFileName}) {
    if (access(absl::StrCat(job_dir, "/", name).c_str(), F_OK) == 0) earlier.push_back(name);
  }
  if (!earlier.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job directory ", job_dir, " already holds ", absl::StrJoin(earlier, " and "),
                     " of an earlier run of ", job_id,
                     ": pass another --job_id for a new run (to continue "
                     "that one, also --resume=",
                     job_dir, ")"));
  }
  RETURN_IF_ERROR(ClaimJobDirectory(job_dir, job_id, kLocalUid));
  const ParallelLayout& layout = spec->parallel();
  std::fprintf(stderr, "dtrain-local: %s as %s in %s\n", path.c_str(), job_id.c_str(),
               job_dir.c_str());
  if (plan::WorkersNeeded(spec->parallel()) > 1) {
    std::fprintf(stderr,
                 "dtrain-local: the spec's layout dp=%d pp=%d tp=%d runs on this one process: "
                 "every layout trains to one worker's numbers\n",
                 layout.dp(), layout.pp(), layout.tp());
  }
  return o;
}

absl::Status Main() {
  std::string device = absl::GetFlag(FLAGS_device);
  kernels::MatmulPrecision precision = kernels::MatmulPrecision::kFp32;
  TrainingRun options;
  if (absl::GetFlag(FLAGS_spec).empty()) {
    options = OptionsFromFlags();
  } else {
    ASSIGN_OR_RETURN(options, OptionsFromSpec(absl::GetFlag(FLAGS_spec), &device, &precision));
  }
  if (Given("matmul_precision")) {
    absl::StatusOr<kernels::MatmulPrecision> flag =
        kernels::ParseMatmulPrecision(absl::GetFlag(FLAGS_matmul_precision));
    RETURN_IF_ERROR(Annotate(flag.status(), "--matmul_precision"));
    precision = *flag;
  }
  if (options.steps > 0 && options.data_path.empty()) {
    return absl::InvalidArgumentError("--data is required to train (--steps > 0)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend,
                   kernels::CreateBackend(device, absl::GetFlag(FLAGS_threads), precision));
  kernels::OpTimingBackend* timing = nullptr;
  if (absl::GetFlag(FLAGS_op_profile)) {
    auto timed = std::make_unique<kernels::OpTimingBackend>(std::move(backend));
    timing = timed.get();
    backend = std::move(timed);
  }
  ASSIGN_OR_RETURN(auto trainer, LocalTrainer::Create(backend.get(), options));
  std::fprintf(stderr, "dtrain-local: %s, %lld parameters, device %s, matmul %s\n",
               options.model.DebugString().c_str(),
               static_cast<long long>(options.model.num_parameters()), backend->info().name.c_str(),
               std::string(kernels::MatmulPrecisionName(precision)).c_str());
  if (!trainer->resumed_from().empty()) {
    std::fprintf(stderr, "dtrain-local: resumed from %s at step %lld\n",
                 trainer->resumed_from().c_str(), static_cast<long long>(trainer->start_step()));
  }
  FILE* json = nullptr;
  const std::string json_path = absl::GetFlag(FLAGS_log_json);
  if (json_path == "-") {
    json = stdout;
  } else if (!json_path.empty()) {
    json = std::fopen(json_path.c_str(), "w");
    if (json == nullptr) {
      return absl::PermissionDeniedError(absl::StrCat("cannot open --log_json=", json_path));
    }
  }
  if (options.steps == 0 && !options.eval_data_path.empty()) {
    // The starting weights' validation loss, alone: the one-worker oracle of a job's val_loss.
    absl::StatusOr<double> val_loss = trainer->Evaluate();
    if (val_loss.ok()) {
      std::fprintf(stderr, "step %5lld  val_loss %.6f\n",
                   static_cast<long long>(trainer->start_step()), *val_loss);
      if (json != nullptr) {
        std::fprintf(json, "{\"step\": %lld, \"val_loss\": %.9g}\n",
                     static_cast<long long>(trainer->start_step()), *val_loss);
      }
    }
    if (json != nullptr && json != stdout) std::fclose(json);
    return val_loss.status();
  }
  int64_t profiled_steps = 0;
  absl::Status status = trainer->Run({[&](const TrainStepMetrics& m) {
    if (timing != nullptr) {
      // The first step's one-time costs (cuBLAS's heuristics, first touches) are left out.
      if (m.step == trainer->start_step() + 1 && m.step < m.total_steps) {
        timing->Reset();
      } else {
        ++profiled_steps;
      }
    }
    const std::string val =
        m.val_loss.has_value() ? absl::StrFormat("  val_loss %.6f", *m.val_loss) : std::string();
    std::fprintf(stderr, "step %5lld/%lld  loss %.6f  grad_norm %.4f  lr %.3e  %.0f tok/s%s%s\n",
                 static_cast<long long>(m.step), static_cast<long long>(m.total_steps), m.loss,
                 m.grad_norm, m.lr, m.tokens_per_s, val.c_str(),
                 m.stopped_early ? "  (early stop)" : "");
    if (json != nullptr) {
      const std::string json_val =
          m.val_loss.has_value() ? absl::StrFormat(", \"val_loss\": %.9g", *m.val_loss) : "";
      std::fprintf(json,
                   "{\"step\": %lld, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                   "\"tokens_per_s\": %.1f%s}\n",
                   static_cast<long long>(m.step), m.loss, m.grad_norm, m.lr, m.tokens_per_s,
                   json_val.c_str());
      std::fflush(json);
    }
    return absl::OkStatus();
  }});
  if (json != nullptr && json != stdout) std::fclose(json);
  RETURN_IF_ERROR(status);
  if (timing != nullptr) {
    std::fprintf(stderr, "dtrain-local: op profile over %lld steps (each op synchronized):\n%s",
                 static_cast<long long>(profiled_steps),
                 kernels::OpProfileTable(timing->Times(), profiled_steps).c_str());
  }
  if (!options.save_path.empty()) {
    std::fprintf(stderr, "dtrain-local: weights saved to %s\n", options.save_path.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace dtrain

int main(int argc, char** argv) {
  absl::FlagsUsageConfig usage;
  usage.version_string = [] { return dtrain::VersionText("dtrain-local") + "\n"; };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage("Trains a GPT-2 model in one process. See README.md.");
  absl::ParseCommandLine(argc, argv);
  absl::Status status = dtrain::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "dtrain-local: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
