#include "worker/run_of_plan.h"

#include "absl/strings/str_cat.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "worker/model/config_proto.h"

namespace dtrain::worker {

absl::StatusOr<std::string> JobDir(const std::string& job_id, const JobSpec& spec,
                                   const std::string& data_root) {
  if (!IsJobId(job_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id \"", job_id,
                     "\" is not a job id (job-NNNNNN): it cannot name the job's directory"));
  }
  return AbsolutePath(JobDirectory(spec.checkpoint().dir(), job_id, data_root));
}

absl::StatusOr<TrainingRun> TrainingRunOf(const JobSpec& spec, const std::string& job_dir) {
  TrainingRun plan;
  ASSIGN_OR_RETURN(plan.model, model::GptConfigFromProto(spec.model()));
  plan.seq = spec.seq_len();
  const OptimizerConfig& p = spec.optimizer();  // every optional field defaulted
  model::OptimizerConfig& o = plan.optimizer;
  o.lr = p.lr();
  o.warmup_steps = p.warmup_steps();
  o.max_lr = p.max_lr();
  o.min_lr_ratio = p.min_lr_ratio();
  o.weight_decay = p.weight_decay();
  o.beta1 = p.beta1();
  o.beta2 = p.beta2();
  o.eps = p.eps();
  o.grad_clip = p.grad_clip();

  plan.data_path = AbsolutePath(spec.dataset());
  plan.init_path = AbsolutePath(spec.init_checkpoint());
  plan.resume_from = AbsolutePath(spec.resume_from());
  plan.seed = spec.seed();
  plan.steps = spec.steps();
  plan.batch = spec.batch_size();
  // Every job checkpoints into its directory (the defaults: plan/checkpoint_plan.h), one-worker
  // jobs without checkpoint.dir included (their directory is under --data_root).
  plan.checkpoint_dir = job_dir;
  plan.checkpoint_every = spec.checkpoint().interval_steps();
  plan.keep_last = spec.checkpoint().keep_last();
  plan.keep_every = spec.checkpoint().keep_every();
  if (spec.has_eval()) {
    plan.eval_data_path = AbsolutePath(spec.eval().dataset());
    plan.eval_every = spec.eval().every_steps();
    plan.eval_batches = spec.eval().batches();  // defaulted by the plan
    plan.early_stopping_patience = spec.eval().early_stopping().patience();
    plan.early_stopping_min_delta = spec.eval().early_stopping().min_delta();
  }
  plan.save_path = absl::StrCat(job_dir, "/", kFinalWeightsFileName);
  return plan;
}

kernels::MatmulPrecision MatmulPrecisionOf(MatmulPrecision planned) {
  switch (planned) {
    case MATMUL_TF32:
      return kernels::MatmulPrecision::kTf32;
    case MATMUL_BF16:
      return kernels::MatmulPrecision::kBf16;
    default:
      return kernels::MatmulPrecision::kFp32;
  }
}

}  // namespace dtrain::worker
