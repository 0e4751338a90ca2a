// When a fused backward sends its input gradient (plan/schedule.h GradientRelease): by default
// after its B part, so the previous stage's backward overlaps this stage's weight gradients;
// kAfterWeights (the textbook 1F1B, measured against in pipeline_bubble_benchmark) after its W.
// Both train the same weights bit for bit; the flight recorder shows where the send fell.
//
// A 2-stage 1F1B job, ranks as threads over the in-process transport, stage 1 observed.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "plan/schedule.h"
#include "worker/comm/flight_recorder.h"
#include "worker/comm/inproc/inproc_transport.h"
#include "worker/comm/observed_transport.h"
#include "worker/parallel/threaded_ranks.h"
#include "worker/testing/text_corpus.h"

namespace dtrain::parallel {
namespace {

using pipeline::GradientRelease;

struct JobRun {
  std::vector<RankRun> ranks;
  std::vector<comm::FlightRecord> stage1_records;
};

JobRun TrainOneFOneB(GradientRelease release) {
  static const std::string data =
      dtrain::testing::WriteTextCorpus(::testing::TempDir() + "/gradient_release.txt", 40000);
  PipelineJob job;
  job.stages = 2;
  job.micro_batches = 8;
  job.steps = 3;
  job.n_embd = 256;
  job.seq = 128;
  job.layers_per_stage = 2;
  job.schedule = pipeline::ScheduleName(pipeline::ScheduleKind::kOneFOneB);
  job.data = data;
  job.gradient_release = release;
  comm::InprocHub hub(2);
  comm::FlightRecorder recorder(1 << 14);
  comm::ObservedTransport stage1(hub.transport(1), nullptr, &recorder);
  JobRun out;
  absl::StatusOr<std::vector<RankRun>> ranks =
      TrainRanksOnThreads({hub.transport(0), &stage1}, [&](int) { return PipelineOptions(job); });
  EXPECT_TRUE(ranks.ok()) << ranks.status();
  if (ranks.ok()) out.ranks = *std::move(ranks);
  out.stage1_records = recorder.Snapshot();
  return out;
}

// Mean time from stage 1's gradient send of a micro-batch to the end of its fused backward
// (which holds B, the send, and W, in that order or B, W, the send), in seconds.
double MeanSendToBackwardEnd(const std::vector<comm::FlightRecord>& records) {
  double sum = 0;
  int n = 0;
  for (const comm::FlightRecord& send : records) {
    if (send.op != comm::FlightOp::kSend || send.kind != comm::MessageKind::kGradient) continue;
    for (const comm::FlightRecord& b : records) {
      if (b.op == comm::FlightOp::kBackwardInput && b.step == send.step &&
          b.micro_batch == send.micro_batch) {
        EXPECT_GE(send.start_ns, b.start_ns);
        EXPECT_LE(send.start_ns, b.end_ns);
        sum += (b.end_ns - send.start_ns) * 1e-9;
        ++n;
      }
    }
  }
  EXPECT_GT(n, 0);
  return n > 0 ? sum / n : 0;
}

TEST(GradientRelease, BothReleasesTrainTheSameWeightsAndTheDefaultSendsBeforeW) {
  const JobRun early = TrainOneFOneB(GradientRelease::kAfterInput);
  const JobRun textbook = TrainOneFOneB(GradientRelease::kAfterWeights);
  ASSERT_EQ(early.ranks.size(), 2u);
  ASSERT_EQ(textbook.ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(early.ranks[r].params, textbook.ranks[r].params) << "rank " << r;
    ASSERT_EQ(early.ranks[r].steps.size(), textbook.ranks[r].steps.size());
    for (size_t s = 0; s < early.ranks[r].steps.size(); ++s) {
      EXPECT_EQ(early.ranks[r].steps[s].loss, textbook.ranks[r].steps[s].loss);
    }
  }
  // The default's send precedes W (a few ms of two blocks' weight gradients); the textbook's
  // ends the backward (only bookkeeping after it).
  const double before_w = MeanSendToBackwardEnd(early.stage1_records);
  const double after_w = MeanSendToBackwardEnd(textbook.stage1_records);
  std::printf("send to the backward's end: %.3f ms before W, %.3f ms after W\n", before_w * 1e3,
              after_w * 1e3);
  EXPECT_GT(before_w, 4 * after_w) << before_w << " s against " << after_w << " s";
}

}  // namespace
}  // namespace dtrain::parallel
