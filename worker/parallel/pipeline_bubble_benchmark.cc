// Pipeline bubble, measured: a 4-stage job (ranks as threads over the in-process transport,
// one CPU thread each) trains a few steps under each schedule; each stage's idle fraction is
// 1 - compute / step time, next to the theory and to the simulator's prediction for equal
// F, B and W costs. Numbers and the command are in docs/PERFORMANCE.md.
//
//   bazel run -c opt //worker/parallel:pipeline_bubble_benchmark -- --micro_batches=8
//
// On a machine with fewer cores than stages the stages share cores, so a stage computes faster
// while others idle; the measured fractions are then only indicative.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/comm/inproc/inproc_transport.h"
#include "worker/parallel/threaded_ranks.h"
#include "plan/simulate.h"
#include "worker/testing/text_corpus.h"

ABSL_FLAG(int, stages, 4, "pipeline stages (ranks)");
ABSL_FLAG(int, micro_batches, 8, "micro-batches per step");
ABSL_FLAG(int, steps, 4, "steps per schedule; the first is warm-up and not counted");
ABSL_FLAG(int, n_embd, 256, "model width");
ABSL_FLAG(int, seq, 128, "tokens per sequence");
ABSL_FLAG(int, layers_per_stage, 2, "transformer blocks per stage");

namespace dtrain::parallel {
namespace {

using pipeline::ScheduleKind;

struct Measured {
  std::vector<double> idle;  // per stage: 1 - compute / step time
  double wait_fraction = 0;  // mean over stages: waiting for a neighbour / step time
  double step_seconds = 0;
  double compute_seconds = 0;  // mean over stages, per step
  // Per stage: the last step's cost of one F, B and W (per micro-batch and chunk).
  std::vector<pipeline::StageCosts> costs;
};

absl::StatusOr<Measured> Run(ScheduleKind kind, int v, const std::string& data) {
  const int p = absl::GetFlag(FLAGS_stages), m = absl::GetFlag(FLAGS_micro_batches);
  const int steps = absl::GetFlag(FLAGS_steps);
  comm::InprocHub hub(p);
  std::vector<comm::Transport*> transports;
  for (int r = 0; r < p; ++r) transports.push_back(hub.transport(r));
  PipelineJob job;
  job.stages = p;
  job.micro_batches = m;
  job.steps = steps;
  job.n_embd = absl::GetFlag(FLAGS_n_embd);
  job.seq = absl::GetFlag(FLAGS_seq);
  job.layers_per_stage = absl::GetFlag(FLAGS_layers_per_stage);
  job.schedule = pipeline::ScheduleName(kind);
  job.virtual_stages = v;
  job.data = data;
  ASSIGN_OR_RETURN(std::vector<RankRun> runs,
                   TrainRanksOnThreads(transports, [&](int) { return PipelineOptions(job); }));
  Measured out;
  for (int r = 0; r < p; ++r) {
    const std::vector<TrainStepMetrics>& metrics = runs[r].steps;
    double compute = 0, total = 0, wait = 0;
    for (size_t s = 1; s < metrics.size(); ++s) {
      compute += metrics[s].compute_seconds;
      total += metrics[s].step_seconds;
      wait += metrics[s].bubble_seconds;
    }
    const double n = metrics.size() - 1;
    out.idle.push_back(1.0 - compute / total);
    out.wait_fraction += wait / total / p;
    out.compute_seconds += compute / n / p;
    out.step_seconds = total / n;
    const double actions = double{m} * v;  // per stage and step: m micro-batches x v chunks
    const ParallelRunStats& stats = runs[r].stats;
    out.costs.push_back({stats.forward_seconds / actions, stats.backward_input_seconds / actions,
                         stats.backward_weight_seconds / actions});
  }
  return out;
}

int Main() {
  const int p = absl::GetFlag(FLAGS_stages), m = absl::GetFlag(FLAGS_micro_batches);
  const std::string data = testing::WriteTextCorpus("/tmp/dtrain_bubble_benchmark.txt", 400000);
  std::printf("pipeline bubble: %d stages, %d micro-batches, %u hardware threads\n", p, m,
              std::thread::hardware_concurrency());
  std::printf("%-12s %-24s %6s %6s %9s %9s %7s %7s %9s %s\n", "schedule", "idle per stage", "mean",
              "wait", "simulated", "sim meas.", "theory", "step s", "compute s",
              "F:B:W ms (stage 0)");
  const double one_f_one_b = double(p - 1) / (m + p - 1);
  struct Row {
    ScheduleKind kind;
    int v;
    double theory;
  } rows[] = {{ScheduleKind::kGpipe, 1, one_f_one_b},
              {ScheduleKind::kOneFOneB, 1, one_f_one_b},
              {ScheduleKind::kInterleaved, 2, (p - 1) / 2.0 / (m + (p - 1) / 2.0)},
              {ScheduleKind::kZeroBubbleH1, 1, one_f_one_b / 3}};
  for (const Row& row : rows) {
    absl::StatusOr<Measured> measured = Run(row.kind, row.v, data);
    if (!measured.ok()) {
      std::fprintf(stderr, "%s: %s\n", pipeline::ScheduleName(row.kind).c_str(),
                   measured.status().ToString().c_str());
      return 1;
    }
    auto sim = pipeline::SimulateSchedule({row.kind, p, m, row.v},
                                          std::vector<pipeline::StageCosts>(p, {1, 1, 1}), 0);
    std::string per_stage;
    double mean = 0;
    for (double f : measured->idle) {
      per_stage += absl::StrFormat("%.2f ", f);
      mean += f / p;
    }
    // The same schedule simulated with the costs this run measured on each stage.
    auto sim_measured = pipeline::SimulateSchedule({row.kind, p, m, row.v}, measured->costs, 0);
    const pipeline::StageCosts& c0 = measured->costs.front();
    std::printf("%-12s %-24s %6.3f %6.3f %9.3f %9.3f %7.3f %7.3f %9.3f %.1f:%.1f:%.1f\n",
                pipeline::ScheduleName(row.kind).c_str(), per_stage.c_str(), mean,
                measured->wait_fraction, sim.ok() ? sim->bubble_fraction : -1.0,
                sim_measured.ok() ? sim_measured->bubble_fraction : -1.0, row.theory,
                measured->step_seconds, measured->compute_seconds, c0.forward * 1e3,
                c0.backward_input * 1e3, c0.backward_weight * 1e3);
  }
  std::printf(
      "idle: 1 - compute / step time; wait: time blocked on a neighbour's activation or "
      "gradient / step time; simulated: equal F, B, W costs; sim meas.: simulated with "
      "the F, B, W costs measured on each stage in this run\n"
      "theory: 1F1B and GPipe (p-1)/(m+p-1); interleaved (p-1)/v / (m + (p-1)/v); "
      "ZB-H1 about a third of 1F1B\n");
  return 0;
}

}  // namespace
}  // namespace dtrain::parallel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dtrain::parallel::Main();
}
