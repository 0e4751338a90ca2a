#include "worker/parallel/threaded_ranks.h"

#include <thread>

#include <algorithm>

#include "kernels/backend.h"
#include "plan/spec_enums.h"

namespace dtrain::parallel {

ParallelTrainingOptions PipelineOptions(const PipelineJob& job) {
  ParallelTrainingOptions o;
  o.run.model = {256, job.seq, job.stages * job.layers_per_stage, job.n_embd / 32, job.n_embd};
  o.run.data_path = job.data;
  o.run.steps = job.steps;
  o.run.batch = job.micro_batches;
  o.run.seq = job.seq;
  ParallelLayout layout;
  layout.set_dp(1);
  layout.set_pp(job.stages);
  layout.set_tp(1);
  layout.set_schedule(job.schedule);
  layout.set_virtual_stages(job.virtual_stages);
  layout.set_bucket_bytes(1 << 20);  // unused: dp = 1 reduces no gradients
  o.plan = PlannedRank(layout, job.micro_batches, 1);
  o.execution = job.execution;
  o.gradient_release = job.gradient_release;
  return o;
}

RankPlan PlannedRank(const ParallelLayout& layout, int batch, int micro_batch_size, int rank) {
  RankPlan plan;
  plan.set_rank(rank);
  *plan.mutable_layout() = layout;
  plan.set_schedule(plan::ParseSchedule(layout.schedule()).value_or(SCHEDULE_UNSPECIFIED));
  plan.set_micro_batch_size(micro_batch_size);
  plan.set_micro_batches(batch / std::max(1, layout.dp()) / std::max(1, micro_batch_size));
  return plan;
}

absl::StatusOr<std::vector<RankRun>> TrainRanksOnThreads(
    const std::vector<comm::Transport*>& transports,
    const std::function<ParallelTrainingOptions(int rank)>& options) {
  const int p = static_cast<int>(transports.size());
  std::vector<RankRun> runs(p);
  std::vector<absl::Status> status(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      auto backend = kernels::CreateBackend("cpu", 1);
      if (!backend.ok()) {
        status[r] = backend.status();
        return;
      }
      ParallelTrainingOptions o = options(r);
      o.plan.set_rank(r);
      auto trainer = ParallelTrainer::Create(backend->get(), transports[r], o);
      if (!trainer.ok()) {
        status[r] = trainer.status();
        return;
      }
      status[r] = (*trainer)->Run({[&](const TrainStepMetrics& s) {
        runs[r].steps.push_back(s);
        runs[r].step_stats.push_back((*trainer)->stats());
        return absl::OkStatus();
      }});
      runs[r].stats = (*trainer)->stats();
      runs[r].last_trace = (*trainer)->last_trace();
      for (int j = 0; j < (*trainer)->num_chunks(); ++j) {
        model::GptStage& stage = (*trainer)->chunk(j);
        const float* p = stage.params();
        runs[r].params.insert(runs[r].params.end(), p, p + stage.layout().total_size());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return runs;
}

}  // namespace dtrain::parallel
