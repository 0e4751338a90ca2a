// Ready work in the executor (stage_executor.h, plan/ready_work.h): a stage whose next input
// has not arrived runs other allowed work, the order actually run is what last_trace() and the
// flight recorder show, and the weights are bit-identical to the fixed order's.
//
// A 2-stage ZB-H1 job (ranks as threads over the in-process transport) where the activation of
// micro-batch 2 of the last step reaches stage 1 300 ms late (HoldingTransport). Stage 1's list
// is F0 B0 F1 B1 W0 F2 B2 W1 ...: the fixed order waits at F2; ready work runs W1 (its B1 is
// done) while F2's input is missing, then F2.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "plan/ready_work.h"
#include "plan/schedule.h"
#include "worker/comm/flight_recorder.h"
#include "worker/comm/inproc/inproc_transport.h"
#include "worker/comm/observed_transport.h"
#include "worker/parallel/threaded_ranks.h"
#include "worker/testing/text_corpus.h"

namespace dtrain::parallel {
namespace {

using pipeline::Action;
using pipeline::ActionType;
using pipeline::Execution;

// Forwards to `inner`, but message `held` from `peer` reaches the receiver `hold` after it is
// first looked for: Arrived says false until then, and a Recv waits until then first.
class HoldingTransport final : public comm::Transport {
 public:
  HoldingTransport(comm::Transport* inner, int peer, comm::MessageKey held, absl::Duration hold)
      : inner_(inner), peer_(peer), held_(held), hold_(hold) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string PeerName(int peer) const override { return inner_->PeerName(peer); }
  absl::StatusOr<comm::SendHandle> StartSend(int peer, const comm::MessageKey& key,
                                             const comm::TensorMeta& meta,
                                             absl::Span<const std::byte> data,
                                             absl::Time deadline) override {
    return inner_->StartSend(peer, key, meta, data, deadline);
  }
  absl::Status Post(int peer, const comm::MessageKey& key, std::string payload) override {
    return inner_->Post(peer, key, std::move(payload));
  }
  absl::Status Recv(int peer, const comm::MessageKey& key, const comm::TensorMeta& expected,
                    comm::PieceSink sink, absl::Time deadline,
                    const comm::RecvOptions& options) override {
    if (IsHeld(peer, key)) absl::SleepFor(ReleaseAt() - absl::Now());
    return inner_->Recv(peer, key, expected, sink, deadline, options);
  }
  bool Arrived(int peer, const comm::MessageKey& key) override {
    if (IsHeld(peer, key) && absl::Now() < ReleaseAt()) return false;
    return inner_->Arrived(peer, key);
  }
  absl::Status PeerStatus(int peer) const override { return inner_->PeerStatus(peer); }

 private:
  bool IsHeld(int peer, const comm::MessageKey& key) const { return peer == peer_ && key == held_; }
  absl::Time ReleaseAt() {
    absl::MutexLock lock(&mu_);
    if (release_at_ == absl::InfiniteFuture()) release_at_ = absl::Now() + hold_;
    return release_at_;
  }
  comm::Transport* inner_;
  const int peer_;
  const comm::MessageKey held_;
  const absl::Duration hold_;
  absl::Mutex mu_;
  absl::Time release_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

struct JobRun {
  std::vector<RankRun> ranks;
  std::vector<comm::FlightRecord> stage1_records;  // stage 1's flight recorder at the end
};

JobRun TrainTwoStages(Execution execution) {
  static const std::string data =
      dtrain::testing::WriteTextCorpus(::testing::TempDir() + "/ready_work.txt", 20000);
  PipelineJob job;
  job.stages = 2;
  job.micro_batches = 8;
  job.steps = 4;
  job.n_embd = 64;
  job.seq = 16;
  job.layers_per_stage = 1;
  job.schedule = pipeline::ScheduleName(pipeline::ScheduleKind::kZeroBubbleH1);
  job.data = data;
  job.execution = execution;
  comm::InprocHub hub(2);
  HoldingTransport holding(
      hub.transport(1), 0,
      comm::MessageKey::Activation(job.steps, /*micro_batch=*/2, /*model_chunk=*/1),
      absl::Milliseconds(300));
  comm::FlightRecorder recorder;
  comm::ObservedTransport stage1(&holding, nullptr, &recorder);
  JobRun out;
  absl::StatusOr<std::vector<RankRun>> ranks =
      TrainRanksOnThreads({hub.transport(0), &stage1}, [&](int) { return PipelineOptions(job); });
  EXPECT_TRUE(ranks.ok()) << ranks.status();
  if (ranks.ok()) out.ranks = *std::move(ranks);
  out.stage1_records = recorder.Snapshot();
  return out;
}

std::vector<Action> ActionsOfStep(const std::vector<comm::FlightRecord>& records, int64_t step) {
  std::vector<Action> out;
  for (const comm::FlightRecord& r : records) {
    if (r.step != step) continue;
    if (r.op == comm::FlightOp::kForward) out.push_back({ActionType::kForward, r.micro_batch, 0});
    if (r.op == comm::FlightOp::kBackwardInput) {
      out.push_back({ActionType::kBackwardInput, r.micro_batch, 0});
    }
    if (r.op == comm::FlightOp::kBackwardWeight) {
      out.push_back({ActionType::kBackwardWeight, r.micro_batch, 0});
    }
  }
  return out;
}

TEST(ReadyWorkExecutor, RunsWhatIsReadyRecordsTheRealOrderAndTrainsBitIdentically) {
  const JobRun fixed = TrainTwoStages(Execution::kFixedOrder);
  const JobRun ready = TrainTwoStages(Execution::kReadyWork);
  ASSERT_EQ(fixed.ranks.size(), 2u);
  ASSERT_EQ(ready.ranks.size(), 2u);
  const pipeline::ScheduleSpec spec{pipeline::ScheduleKind::kZeroBubbleH1, 2, 8, 1};
  const std::vector<Action> list = *pipeline::StageActions(spec, 1);

  // The fixed order waits at F2; ready work runs W1 first (once F2 is allowed B1 has run, and
  // W0 comes before F2 in the list), then F2.
  EXPECT_EQ(pipeline::TraceToString(fixed.ranks[1].last_trace), pipeline::TraceToString(list));
  const std::vector<Action>& order = ready.ranks[1].last_trace;
  ASSERT_EQ(order.size(), list.size());
  auto at = [&](const Action& a) {
    return std::find(order.begin(), order.end(), a) - order.begin();
  };
  EXPECT_LT(at({ActionType::kBackwardWeight, 1, 0}), at({ActionType::kForward, 2, 0}))
      << pipeline::TraceToString(order);
  EXPECT_TRUE(pipeline::CheckExecutedTrace(spec, 1, Execution::kReadyWork, order).ok())
      << pipeline::CheckExecutedTrace(spec, 1, Execution::kReadyWork, order);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(
        pipeline::CheckExecutedTrace(spec, r, Execution::kReadyWork, ready.ranks[r].last_trace)
            .ok());
    EXPECT_LE(ready.ranks[r].stats.peak_live_activations, 2) << "rank " << r;  // min(p, m)
  }

  // The flight recorder (what `dtrain diagnose` and `dtrain trace` read) holds that order.
  EXPECT_EQ(pipeline::TraceToString(ActionsOfStep(ready.stage1_records, 4)),
            pipeline::TraceToString(order));
  EXPECT_EQ(pipeline::TraceToString(ActionsOfStep(fixed.stage1_records, 4)),
            pipeline::TraceToString(list));

  // Each kind sums its gradients in the list's order: losses and weights bit-identical.
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(fixed.ranks[r].steps.size(), ready.ranks[r].steps.size());
    for (size_t s = 0; s < fixed.ranks[r].steps.size(); ++s) {
      EXPECT_EQ(fixed.ranks[r].steps[s].loss, ready.ranks[r].steps[s].loss) << "step " << s + 1;
      EXPECT_EQ(fixed.ranks[r].steps[s].grad_norm, ready.ranks[r].steps[s].grad_norm);
    }
    const std::vector<float>& a = fixed.ranks[r].params;
    const std::vector<float>& b = ready.ranks[r].params;
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "rank " << r;
  }
  // The wait for the late activation counts as the bubble, not compute, in both orders.
  EXPECT_GT(fixed.ranks[1].steps.back().bubble_seconds, 0.25);
}

}  // namespace
}  // namespace dtrain::parallel
