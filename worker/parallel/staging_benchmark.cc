// What staging costs a step: the Quick start job (deploy/examples/quickstart-pp2-tp2.json:
// pp=2 x tp=2, vocab 256, context 128, 4 layers, width 128, 4 micro-batches of 3 sequences of
// 128 tokens, 1F1B) with its 4 ranks as threads over the in-process transport (one CPU thread
// each), on --device=cpu (no copies: the transport reads device memory) and on cpu-staging
// (every send, receive and collective copied through pinned buffers on a copy thread, device
// memory PROT_NONE to all but the backend's ops), the latter with the default 1 MiB staging chunk and with 16 KiB chunks
// (the tp all-reduces of 192 KiB then run in 12 chunks, so copies overlap collectives).
// The configurations take turns over --repeats rounds; each reports its median. Numbers and the
// command are in docs/PERFORMANCE.md ("Staging").
//
//   bazel run -c opt //worker/parallel:staging_benchmark
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "worker/comm/inproc/inproc_transport.h"
#include "worker/parallel/parallel_trainer.h"
#include "worker/parallel/threaded_ranks.h"
#include "worker/testing/text_corpus.h"

ABSL_FLAG(int, steps, 20, "steps per run");
ABSL_FLAG(int, warmup, 3, "first steps of each run not counted");
ABSL_FLAG(int, repeats, 3, "rounds over every configuration; each reports its median");

namespace dtrain::parallel {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  const char* device;
  int64_t chunk_bytes;
};

struct Measured {
  double step_ms = 0;  // rank 0, mean over the counted steps
  // Last step, summed over the ranks, per rank: MB staged, ms waiting for copies, ms of chunked
  // collectives while the next chunk's copy ran.
  double staged_mb = 0, wait_ms = 0, overlapped_ms = 0;
};

absl::StatusOr<Measured> RunOnce(const Config& config, const std::string& data) {
  constexpr int kRanks = 4;
  const int steps = absl::GetFlag(FLAGS_steps);
  comm::InprocHub hub(kRanks);
  std::vector<absl::Status> status(kRanks);
  std::vector<ParallelRunStats> stats(kRanks);
  std::vector<Clock::time_point> reported;
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
          kernels::CreateBackend(config.device, 1);
      if (!backend.ok()) {
        status[r] = backend.status();
        return;
      }
      ParallelTrainingOptions o;
      o.run.model = {/*vocab_size=*/256, /*context=*/128, /*n_layer=*/4, /*n_head=*/4,
                     /*n_embd=*/128};
      o.run.data_path = data;
      o.run.steps = steps;
      o.run.batch = 12;
      o.run.seq = 128;
      o.run.seed = 1337;
      ParallelLayout layout;
      layout.set_dp(1);
      layout.set_pp(2);
      layout.set_tp(2);
      layout.set_schedule("1f1b");
      layout.set_virtual_stages(1);
      layout.set_bucket_bytes(25 << 20);
      o.plan = PlannedRank(layout, o.run.batch, 3, r);
      o.staging_chunk_bytes = config.chunk_bytes;
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
      }
      status[r] = (*trainer)->Run(callbacks);
      stats[r] = (*trainer)->stats();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  Measured m;
  const std::chrono::duration<double, std::milli> counted = reported.back() - reported[warmup];
  m.step_ms = counted.count() / (reported.size() - 1 - warmup);
  for (const ParallelRunStats& s : stats) {
    m.staged_mb += s.staged_bytes / 1e6 / kRanks;
    m.wait_ms += s.staging_wait_seconds * 1e3 / kRanks;
    m.overlapped_ms += s.staging_overlapped_seconds * 1e3 / kRanks;
  }
  return m;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status Run() {
  const std::string data = testing::WriteTextCorpus("/tmp/dtrain_staging_benchmark.txt", 400000);
  const std::vector<Config> configs = {
      {"cpu", 1 << 20}, {"cpu-staging", 1 << 20}, {"cpu-staging", 16 << 10}};
  std::vector<std::vector<Measured>> runs(configs.size());
  for (int round = 0; round < absl::GetFlag(FLAGS_repeats); ++round) {
    for (size_t c = 0; c < configs.size(); ++c) {
      ASSIGN_OR_RETURN(Measured m, RunOnce(configs[c], data));
      runs[c].push_back(m);
    }
  }
  std::printf(
      "Quick start job (pp=2 tp=2, 4 ranks as threads, 1 CPU thread each), %d steps (first %d "
      "not counted), median of %d runs, %u hardware threads\n",
      absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_repeats),
      std::thread::hardware_concurrency());
  std::printf("%-12s %8s %9s %9s %10s %9s %14s\n", "device", "chunk", "step ms", "overhead",
              "staged MB", "wait ms", "overlapped ms");
  double base = 0;
  for (size_t c = 0; c < configs.size(); ++c) {
    std::vector<double> step, mb, wait, overlapped;
    for (const Measured& m : runs[c]) {
      step.push_back(m.step_ms);
      mb.push_back(m.staged_mb);
      wait.push_back(m.wait_ms);
      overlapped.push_back(m.overlapped_ms);
    }
    const double ms = Median(step);
    if (c == 0) base = ms;
    std::printf("%-12s %7lldK %9.2f %8.1f%% %10.2f %9.2f %14.2f\n", configs[c].device,
                static_cast<long long>(configs[c].chunk_bytes >> 10), ms,
                100.0 * (ms - base) / base, Median(mb), Median(wait), Median(overlapped));
  }
  std::printf(
      "step ms: rank 0's wall time per step; overhead: against --device=cpu; staged MB, wait "
      "ms, overlapped ms: last step, mean per rank: bytes copied each way, time the rank waited "
      "for copies (the exposed copy time), time of chunked collectives during which the next "
      "chunk's copy ran (copy time that could hide behind them)\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace dtrain::parallel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status s = dtrain::parallel::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "staging_benchmark: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
