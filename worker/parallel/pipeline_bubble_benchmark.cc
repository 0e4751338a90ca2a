// Pipeline bubble, measured: a pipeline job (ranks as threads over the in-process transport, one
// CPU thread each) trains a few steps under each schedule; ZB-H1 runs twice, in its list's fixed
// order and under ready work (plan/ready_work.h). Per stage:
//   idle (step)     1 - compute / step time: the whole step, optimizer and reductions included
//   idle (pipeline) 1 - compute / the step's pipeline window, from the first F / B / W any rank
//                   starts to the last one any rank ends (flight recorder times; the ranks share
//                   one clock): what the simulator's bubble measures
// next to the theory and to the simulator (plan/simulate.h) with equal F, B and W costs and with
// the costs measured in the same run, in the row's execution. Numbers and the command are in
// docs/PERFORMANCE.md.
//
//   bazel run -c opt //worker/parallel:pipeline_bubble_benchmark -- --stages=2 --rounds=3
//
// On a machine with fewer cores than stages the stages share cores, so a stage computes faster
// while others idle; the measured fractions are then only indicative.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "plan/ready_work.h"
#include "plan/simulate.h"
#include "worker/comm/flight_recorder.h"
#include "worker/comm/inproc/inproc_transport.h"
#include "worker/comm/observed_transport.h"
#include "worker/parallel/threaded_ranks.h"
#include "worker/testing/text_corpus.h"

ABSL_FLAG(int, stages, 4, "pipeline stages (ranks)");
ABSL_FLAG(int, micro_batches, 8, "micro-batches per step");
ABSL_FLAG(int, steps, 4, "steps per schedule; the first is warm-up and not counted");
ABSL_FLAG(int, n_embd, 256, "model width");
ABSL_FLAG(int, seq, 128, "tokens per sequence");
ABSL_FLAG(int, layers_per_stage, 2, "transformer blocks per stage");
ABSL_FLAG(int, rounds, 1, "times every row runs, alternated (round 1 all rows, round 2 ...)");
ABSL_FLAG(std::string, rows, "gpipe,1f1b,1f1b/textbook,interleaved,zb-h1,zb-h1/ready",
          "rows to run: gpipe, 1f1b, 1f1b/textbook (the input gradient sent after W), "
          "interleaved (v=2), zb-h1 (fixed order), zb-h1/ready");

namespace dtrain::parallel {
namespace {

using pipeline::Execution;
using pipeline::ScheduleKind;

struct Row {
  std::string name;
  ScheduleKind kind;
  int v;
  Execution execution;
  // The fused backward's: dtrain's executor sends its input gradient after B; the textbook
  // (1f1b/textbook, what the zero-bubble paper compares with) after W.
  pipeline::GradientRelease release = pipeline::GradientRelease::kAfterInput;
};

struct Measured {
  std::vector<double> idle;           // per stage: 1 - compute / step time
  std::vector<double> pipeline_idle;  // per stage: 1 - compute / pipeline window
  double wait_fraction = 0;           // mean over stages: waiting for a neighbour / step time
  double step_seconds = 0;
  double window_seconds = 0;  // the pipeline window per step
  // Per stage: the cost of one F, B and W (per micro-batch and chunk), mean over counted steps.
  std::vector<pipeline::StageCosts> costs;
  int moved = 0;  // positions of the last step's traces (all stages) that differ from the lists
};

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one.empty() ? "?" : absl::StrCat(one, " ", five, " ", fifteen);
}

absl::StatusOr<Measured> Run(const Row& row, const std::string& data) {
  const int p = absl::GetFlag(FLAGS_stages), m = absl::GetFlag(FLAGS_micro_batches);
  const int steps = absl::GetFlag(FLAGS_steps);
  comm::InprocHub hub(p);
  std::vector<std::unique_ptr<comm::FlightRecorder>> recorders;
  std::vector<std::unique_ptr<comm::ObservedTransport>> observed;
  std::vector<comm::Transport*> transports;
  for (int r = 0; r < p; ++r) {
    recorders.push_back(std::make_unique<comm::FlightRecorder>(1 << 16));
    observed.push_back(
        std::make_unique<comm::ObservedTransport>(hub.transport(r), nullptr, recorders[r].get()));
    transports.push_back(observed[r].get());
  }
  PipelineJob job;
  job.stages = p;
  job.micro_batches = m;
  job.steps = steps;
  job.n_embd = absl::GetFlag(FLAGS_n_embd);
  job.seq = absl::GetFlag(FLAGS_seq);
  job.layers_per_stage = absl::GetFlag(FLAGS_layers_per_stage);
  job.schedule = pipeline::ScheduleName(row.kind);
  job.virtual_stages = row.v;
  job.data = data;
  job.execution = row.execution;
  job.gradient_release = row.release;
  ASSIGN_OR_RETURN(std::vector<RankRun> runs,
                   TrainRanksOnThreads(transports, [&](int) { return PipelineOptions(job); }));
  // The pipeline window of each step: its first action's start to its last action's end, over
  // every rank (the ranks are threads: one clock).
  std::map<int64_t, std::pair<int64_t, int64_t>> window;  // step -> (first start, last end) ns
  for (const auto& recorder : recorders) {
    for (const comm::FlightRecord& rec : recorder->Snapshot()) {
      const bool action = rec.op == comm::FlightOp::kForward ||
                          rec.op == comm::FlightOp::kBackwardInput ||
                          rec.op == comm::FlightOp::kBackwardWeight;
      if (!action || rec.step < 0) continue;
      auto [it, fresh] = window.try_emplace(rec.step, rec.start_ns, rec.end_ns);
      it->second.first = std::min(it->second.first, rec.start_ns);
      it->second.second = std::max(it->second.second, rec.end_ns);
    }
  }
  Measured out;
  // Per stage and step: m micro-batches x v chunks.
  const double actions = static_cast<double>(m) * row.v;
  double windows = 0;
  for (int s = 2; s <= steps; ++s) windows += (window[s].second - window[s].first) * 1e-9;
  for (int r = 0; r < p; ++r) {
    const std::vector<TrainStepMetrics>& metrics = runs[r].steps;
    double compute = 0, total = 0, wait = 0;
    pipeline::StageCosts cost{0, 0, 0};
    for (size_t s = 1; s < metrics.size(); ++s) {
      compute += metrics[s].compute_seconds;
      total += metrics[s].step_seconds;
      wait += metrics[s].bubble_seconds;
      const ParallelRunStats& stats = runs[r].step_stats[s];
      cost.forward += stats.forward_seconds / actions;
      cost.backward_input += stats.backward_input_seconds / actions;
      cost.backward_weight += stats.backward_weight_seconds / actions;
    }
    const double n = metrics.size() - 1;
    out.idle.push_back(1.0 - compute / total);
    out.pipeline_idle.push_back(1.0 - compute / windows);
    out.wait_fraction += wait / total / p;
    out.step_seconds = total / n;
    out.window_seconds = windows / n;
    out.costs.push_back({cost.forward / n, cost.backward_input / n, cost.backward_weight / n});
    const std::vector<pipeline::Action> list = *pipeline::StageActions({row.kind, p, m, row.v}, r);
    for (size_t i = 0; i < list.size() && i < runs[r].last_trace.size(); ++i) {
      out.moved += !(list[i] == runs[r].last_trace[i]);
    }
  }
  return out;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / v.size();
}

int Main() {
  const int p = absl::GetFlag(FLAGS_stages), m = absl::GetFlag(FLAGS_micro_batches);
  const std::string data = testing::WriteTextCorpus("/tmp/dtrain_bubble_benchmark.txt", 400000);
  std::printf("pipeline bubble: %d stages, %d micro-batches, %u hardware threads\n", p, m,
              std::thread::hardware_concurrency());
  std::printf("%-13s %-20s %6s %-20s %6s %6s %6s %7s %7s %7s %6s %6s %5s %s\n", "row",
              "idle/stage (step)", "mean", "idle/stage (pipe)", "mean", "wait", "sim=", "sim",
              "theory", "step s", "pipe s", "moved", "load", "F:B:W ms (stage 0)");
  const double one_f_one_b = double(p - 1) / (m + p - 1);
  const std::vector<Row> all = {
      {"gpipe", ScheduleKind::kGpipe, 1, Execution::kFixedOrder},
      {"1f1b", ScheduleKind::kOneFOneB, 1, Execution::kFixedOrder},
      {"1f1b/textbook", ScheduleKind::kOneFOneB, 1, Execution::kFixedOrder,
       pipeline::GradientRelease::kAfterWeights},
      {"interleaved", ScheduleKind::kInterleaved, 2, Execution::kFixedOrder},
      {"zb-h1", ScheduleKind::kZeroBubbleH1, 1, Execution::kFixedOrder},
      {"zb-h1/ready", ScheduleKind::kZeroBubbleH1, 1, Execution::kReadyWork}};
  std::vector<Row> rows;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_rows), ',')) {
    auto it = std::find_if(all.begin(), all.end(), [&](const Row& r) { return r.name == name; });
    if (it == all.end()) {
      std::fprintf(stderr, "unknown row %s\n", std::string(name).c_str());
      return 2;
    }
    rows.push_back(*it);
  }
  for (int round = 1; round <= absl::GetFlag(FLAGS_rounds); ++round) {
    std::map<std::string, double> idle;  // row -> mean idle over the pipeline window
    for (const Row& row : rows) {
      const std::string load = LoadAverage();
      absl::StatusOr<Measured> measured = Run(row, data);
      if (!measured.ok()) {
        std::fprintf(stderr, "%s: %s\n", row.name.c_str(), measured.status().ToString().c_str());
        return 1;
      }
      const pipeline::ScheduleSpec spec{row.kind, p, m, row.v};
      auto equal = pipeline::SimulateSchedule(spec, std::vector<pipeline::StageCosts>(p, {1, 1, 1}),
                                              0, row.execution, row.release);
      // The same schedule, in the row's execution, simulated with this run's costs per stage.
      auto sim = pipeline::SimulateSchedule(spec, measured->costs, 0, row.execution, row.release);
      idle[row.name] = Mean(measured->pipeline_idle);
      const double theory = row.kind == ScheduleKind::kInterleaved
                                ? (p - 1) / 2.0 / (m + (p - 1) / 2.0)
                            : row.kind == ScheduleKind::kZeroBubbleH1 ? one_f_one_b / 3
                                                                      : one_f_one_b;
      std::string step_idle, pipe_idle;
      for (double f : measured->idle) step_idle += absl::StrFormat("%.2f ", f);
      for (double f : measured->pipeline_idle) pipe_idle += absl::StrFormat("%.3f ", f);
      const pipeline::StageCosts& c0 = measured->costs.front();
      std::printf(
          "%-13s %-20s %6.3f %-20s %6.3f %6.3f %6.3f %7.3f %7.3f %7.3f %6.3f %6d %5s "
          "%.1f:%.1f:%.1f\n",
          row.name.c_str(), step_idle.c_str(), Mean(measured->idle), pipe_idle.c_str(),
          Mean(measured->pipeline_idle), measured->wait_fraction,
          equal.ok() ? equal->bubble_fraction : -1.0, sim.ok() ? sim->bubble_fraction : -1.0,
          theory, measured->step_seconds, measured->window_seconds, measured->moved,
          load.substr(0, load.find(' ')).c_str(), c0.forward * 1e3, c0.backward_input * 1e3,
          c0.backward_weight * 1e3);
      std::fflush(stdout);
    }
    // ZB-H1's idle against each 1F1B's measured in this round, where both ran.
    for (const char* zb : {"zb-h1", "zb-h1/ready"}) {
      for (const char* base : {"1f1b", "1f1b/textbook"}) {
        if (idle.count(zb) && idle.count(base) && idle[base] > 0) {
          std::printf("round %d: %s idle / %s idle = %.2f\n", round, zb, base,
                      idle[zb] / idle[base]);
        }
      }
    }
  }
  std::printf(
      "idle (step): 1 - compute / step time; idle (pipe): 1 - compute / the step's pipeline "
      "window (first F/B/W start to last end, any rank); wait: blocked on a neighbour / step "
      "time; sim=: simulated, equal F, B, W costs; sim: simulated with the F, B, W costs measured "
      "on each stage in this run (both in the row's execution: zb-h1/ready simulates ready work); "
      "moved: positions of the last step's traces that differ from the schedule's lists; load: "
      "1-minute load average before the row; 1f1b/textbook: a fused backward sends its input "
      "gradient after its W (dtrain's after its B)\n"
      "theory (the textbook's): 1F1B and GPipe (p-1)/(m+p-1); interleaved (p-1)/v / (m + (p-1)/v); "
      "ZB-H1 about a third of 1F1B\n");
  return 0;
}

}  // namespace
}  // namespace dtrain::parallel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dtrain::parallel::Main();
}
