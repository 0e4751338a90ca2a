// What the flight recorder costs a training step: a pp=2 job (1F1B; ranks as threads over the
// in-process transport, one CPU thread each) trains rounds of steps with every rank's transport
// wrapped in an ObservedTransport with a recorder, and rounds without, alternating so that
// drift of the machine hits both alike. Prints the mean step time of each, the difference and
// the records made per step and rank. Numbers in docs/PERFORMANCE.md ("Flight recorder").
//
//   bazel run -c opt //worker/parallel:flight_recorder_benchmark -- --rounds=6
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/status_macros.h"
#include "worker/comm/flight_recorder.h"
#include "worker/comm/inproc/inproc_transport.h"
#include "worker/comm/observed_transport.h"
#include "worker/parallel/threaded_ranks.h"
#include "worker/testing/text_corpus.h"

ABSL_FLAG(int, rounds, 6, "rounds with and without the recorder each, alternating");
ABSL_FLAG(int, steps, 12, "steps per round; the first is warm-up and not counted");
ABSL_FLAG(int, micro_batches, 4, "micro-batches per step");
ABSL_FLAG(int, n_embd, 128, "model width");
ABSL_FLAG(int, seq, 64, "tokens per sequence");

namespace dtrain::parallel {
namespace {

struct Round {
  double step_seconds = 0;      // mean over counted steps, rank 0
  double records_per_step = 0;  // per rank
};

absl::StatusOr<Round> RunRound(bool record, const std::string& data) {
  PipelineJob job;
  job.micro_batches = absl::GetFlag(FLAGS_micro_batches);
  job.steps = absl::GetFlag(FLAGS_steps);
  job.n_embd = absl::GetFlag(FLAGS_n_embd);
  job.seq = absl::GetFlag(FLAGS_seq);
  job.data = data;
  comm::InprocHub hub(job.stages);
  std::vector<std::unique_ptr<comm::FlightRecorder>> recorders;
  std::vector<std::unique_ptr<comm::ObservedTransport>> observed;
  std::vector<comm::Transport*> transports;
  for (int r = 0; r < job.stages; ++r) {
    recorders.push_back(std::make_unique<comm::FlightRecorder>());
    observed.push_back(
        std::make_unique<comm::ObservedTransport>(hub.transport(r), nullptr, recorders[r].get()));
    transports.push_back(record ? observed[r].get() : hub.transport(r));
  }
  ASSIGN_OR_RETURN(std::vector<RankRun> runs,
                   TrainRanksOnThreads(transports, [&](int) { return PipelineOptions(job); }));
  const std::vector<TrainStepMetrics>& steps = runs[0].steps;
  Round out;
  for (size_t s = 1; s < steps.size(); ++s) out.step_seconds += steps[s].step_seconds;
  out.step_seconds /= steps.size() - 1;
  out.records_per_step = double(recorders[0]->recorded()) / job.steps;
  return out;
}

int Main() {
  const std::string data =
      testing::WriteTextCorpus("/tmp/dtrain_flight_recorder_benchmark.txt", 400000);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  double with = 0, without = 0, records = 0;
  for (int i = 0; i < rounds; ++i) {
    for (bool record : {false, true}) {
      absl::StatusOr<Round> r = RunRound(record, data);
      if (!r.ok()) {
        std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
        return 1;
      }
      std::printf("round %d %-8s step %.3f ms\n", i, record ? "recorder" : "none",
                  r->step_seconds * 1e3);
      (record ? with : without) += r->step_seconds / rounds;
      if (record) records = r->records_per_step;
    }
  }
  std::printf(
      "RESULT step_ms_without=%.3f step_ms_with=%.3f overhead=%.2f%% "
      "records_per_step_per_rank=%.0f\n",
      without * 1e3, with * 1e3, (with / without - 1) * 100, records);
  return 0;
}

}  // namespace
}  // namespace dtrain::parallel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dtrain::parallel::Main();
}
