// What checkpoints cost training: the Quick start job (deploy/examples/quickstart-pp2-tp2.json:
// pp=2 x tp=2, vocab 256, context 128, 4 layers, width 128, 4 micro-batches of 3 sequences of
// 128 tokens, 1F1B) trains --steps steps with its 4 ranks as threads over the in-process
// transport (one CPU thread each), writing real checkpoints into --dir, under each of:
//   none        no checkpoint_dir
//   foreground  every N steps, training waits until the step is written and sealed
//   background  every N steps, snapshot at the step boundary, written while training goes on
// for N = 1 and N = 10. A step's time is rank 0's wall time from one step's report to the next,
// so a checkpoint's stall counts in the step after it; the first steps (warm-up) are left out.
// The configurations take turns over --repeats rounds and each reports its median, so a
// machine busy with something else slows all of them alike. Numbers and the command are in
// docs/PERFORMANCE.md ("Background checkpoints").
//
//   bazel run -c opt //worker/parallel:checkpoint_seal_benchmark -- --dir=/tmp/ckpt_bench
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "worker/comm/inproc/inproc_transport.h"
#include "worker/parallel/parallel_trainer.h"
#include "worker/parallel/threaded_ranks.h"
#include "worker/testing/text_corpus.h"

ABSL_FLAG(std::string, dir, "/tmp/dtrain_checkpoint_benchmark",
          "where the runs write their checkpoints (in run-<pid>-<n>/, removed after each run)");
ABSL_FLAG(int, steps, 40, "steps per run");
ABSL_FLAG(int, warmup, 3, "first steps of each run not counted");
ABSL_FLAG(int, repeats, 3, "rounds over every configuration; each reports its median");
ABSL_FLAG(std::vector<std::string>, configs,
          std::vector<std::string>({"none", "foreground10", "background10", "foreground1",
                                    "background1"}),
          "the configurations to run (writes and every; `none` first: the others are "
          "compared with it)");

namespace dtrain::parallel {
namespace {

using Clock = std::chrono::steady_clock;

constexpr model::GptConfig kQuickstart{/*vocab_size=*/256, /*context=*/128, /*n_layer=*/4,
                                       /*n_head=*/4, /*n_embd=*/128};
constexpr int kPp = 2, kTp = 2;

struct Config {
  std::string name;  // "none", "foreground", "background"
  int every;         // 0: no checkpoints
  bool background;
};

// "background10" -> {"background", 10, true}; "none" -> no checkpoints.
absl::StatusOr<Config> ParseConfig(const std::string& text) {
  if (text == "none") return Config{"none", 0, false};
  for (const char* writes : {"foreground", "background"}) {
    int every = 0;
    if (absl::StartsWith(text, writes) && absl::SimpleAtoi(text.substr(strlen(writes)), &every) &&
        every > 0) {
      return Config{writes, every, std::string(writes) == "background"};
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--configs: unknown \"", text, "\" (none, foregroundN or backgroundN)"));
}

struct Measured {
  double step_ms = 0;        // mean over the counted steps
  double cpu_ms = 0;         // the process's CPU time (user + system) per step, whole run
  double blocked_ms = 0;     // mean per checkpoint, rank 0: snapshot + wait for the previous
  double checkpoint_ms = 0;  // mean per checkpoint, rank 0: handed over to sealed
};

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

absl::StatusOr<Measured> RunOnce(const Config& config, const std::string& data,
                                 const std::string& dir) {
  const int ranks = kPp * kTp, steps = absl::GetFlag(FLAGS_steps);
  const double cpu_start = CpuSeconds();
  comm::InprocHub hub(ranks);
  std::vector<absl::Status> status(ranks);
  std::vector<Clock::time_point> reported;  // rank 0: when each step was reported
  std::vector<CheckpointWritten> sealed;    // rank 0
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<kernels::Backend>> backend = kernels::CreateBackend("cpu", 1);
      if (!backend.ok()) {
        status[r] = backend.status();
        return;
      }
      ParallelTrainingOptions o;
      o.run.model = kQuickstart;
      o.run.data_path = data;
      o.run.steps = steps;
      o.run.batch = 12;
      o.run.seq = 128;
      o.run.seed = 1337;
      if (config.every > 0) {
        o.run.checkpoint_dir = dir;
        o.run.checkpoint_every = config.every;
        o.run.background_checkpoints = config.background;
      }
      ParallelLayout layout;
      layout.set_dp(1);
      layout.set_pp(kPp);
      layout.set_tp(kTp);
      layout.set_schedule("1f1b");
      layout.set_virtual_stages(1);
      layout.set_bucket_bytes(25 << 20);
      o.plan = PlannedRank(layout, o.run.batch, 3, r);
      absl::StatusOr<std::unique_ptr<ParallelTrainer>> trainer =
          ParallelTrainer::Create(backend->get(), hub.transport(r), o);
      if (!trainer.ok()) {
        status[r] = trainer.status();
        return;
      }
      TrainingCallbacks callbacks;
      if (r == 0) {
        callbacks.step = [&](const TrainStepMetrics&) {
          reported.push_back(Clock::now());
          return absl::OkStatus();
        };
        callbacks.checkpoint = [&](const CheckpointWritten& c) { sealed.push_back(c); };
      }
      status[r] = (*trainer)->Run(callbacks);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  Measured m;
  m.cpu_ms = (CpuSeconds() - cpu_start) * 1e3 / steps;
  const std::chrono::duration<double, std::milli> counted = reported.back() - reported[warmup];
  m.step_ms = counted.count() / (reported.size() - 1 - warmup);
  for (const CheckpointWritten& c : sealed) {
    m.blocked_ms += c.blocked_seconds * 1e3 / sealed.size();
    m.checkpoint_ms += c.seconds * 1e3 / sealed.size();
  }
  return m;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status Run() {
  const std::string data = testing::WriteTextCorpus("/tmp/dtrain_checkpoint_benchmark.txt", 400000);
  const std::string root = AbsolutePath(absl::GetFlag(FLAGS_dir));
  RETURN_IF_ERROR(MakeDirectories(root));
  std::vector<Config> configs;
  for (const std::string& text : absl::GetFlag(FLAGS_configs)) {
    ASSIGN_OR_RETURN(Config config, ParseConfig(text));
    configs.push_back(config);
  }
  const int kConfigs = static_cast<int>(configs.size());
  std::vector<std::vector<Measured>> runs(kConfigs);
  int n = 0;
  for (int round = 0; round < absl::GetFlag(FLAGS_repeats); ++round) {
    for (int c = 0; c < kConfigs; ++c) {
      // A fresh job directory per run: a sealed step is never rewritten.
      const std::string dir = absl::StrCat(root, "/run-", getpid(), "-", n++);
      ASSIGN_OR_RETURN(Measured m, RunOnce(configs[c], data, dir));
      runs[c].push_back(m);
      std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
    }
  }
  std::printf(
      "Quick start job (pp=%d tp=%d, %d ranks as threads, 1 CPU thread each), %d steps "
      "(first %d not counted), median of %d runs, %u hardware threads\n",
      kPp, kTp, kPp * kTp, absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_warmup),
      absl::GetFlag(FLAGS_repeats), std::thread::hardware_concurrency());
  std::printf("%-11s %6s %9s %9s %9s %12s %14s %9s %9s %9s\n", "writes", "every", "step ms",
              "overhead", "paired", "blocked ms", "checkpoint ms", "stall", "cpu ms", "cpu");
  double base = 0, base_cpu = 0;
  for (int c = 0; c < kConfigs; ++c) {
    std::vector<double> step, paired, blocked, total, cpu;
    for (size_t i = 0; i < runs[c].size(); ++i) {
      const Measured& m = runs[c][i];
      step.push_back(m.step_ms);
      // Against the first configuration's run of the same round, a minute or less apart.
      paired.push_back(100.0 * (m.step_ms / runs[0][i].step_ms - 1.0));
      blocked.push_back(m.blocked_ms);
      total.push_back(m.checkpoint_ms);
      cpu.push_back(m.cpu_ms);
    }
    const double ms = Median(step), cpu_ms = Median(cpu);
    if (c == 0) base = ms, base_cpu = cpu_ms;
    const double stall =
        configs[c].every > 0 ? 100.0 * Median(blocked) / (configs[c].every * base) : 0.0;
    std::printf("%-11s %6s %9.2f %8.1f%% %8.1f%% %12.2f %14.2f %8.1f%% %9.2f %8.1f%%\n",
                configs[c].name.c_str(),
                configs[c].every > 0 ? absl::StrCat(configs[c].every).c_str() : "-", ms,
                100.0 * (ms - base) / base, Median(paired), Median(blocked), Median(total), stall,
                cpu_ms, 100.0 * (cpu_ms - base_cpu) / base_cpu);
  }
  std::printf(
      "step ms: rank 0's wall time per step, checkpoint stalls included (overhead: "
      "medians against the first configuration's; paired: median over rounds of each "
      "round's ratio); blocked ms: "
      "per checkpoint, what training stopped for (snapshot, waiting for the previous "
      "one; in the foreground also the writing); checkpoint ms: per checkpoint, from "
      "hand-over to sealed; stall: blocked ms per step of `none`, the overhead without "
      "the noise of whole step times; cpu ms: the process's CPU time per step (every "
      "thread, kernel included), cpu: against the first configuration's, the work "
      "checkpoints add, which slows steps only where no core is idle for it\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace dtrain::parallel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status s = dtrain::parallel::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "checkpoint_seal_benchmark: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
