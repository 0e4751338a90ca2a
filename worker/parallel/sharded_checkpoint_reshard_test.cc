// Resuming on any layout (issue 12): a step saved by one layout (dp, pp, tp, virtual stages,
// schedule, ZeRO-1) is resumed by another, and the next 10 steps' losses are those of the run
// that never stopped, within 1e-5 relative. Sources (1,1,1), (2,2,1) and (1,2,2), each with
// ZeRO-1 on and off (with dp = 1 the flag changes no file), and (1,2,2) with two interleaved
// virtual stages; targets each of them, (1,1,4), (4,1,1) with and without ZeRO-1, and zb-h1.
// Ranks are threads over the in-process transport; the one-worker trainer (LocalTrainer) saves
// and resumes the same format. The real-process run over gRPC is
// tests/integration/reshard_cases.py.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "worker/comm/inproc/inproc_transport.h"
#include "worker/local_trainer.h"
#include "worker/parallel/parallel_trainer.h"
#include "worker/parallel/threaded_ranks.h"
#include "worker/testing/test_device.h"
#include "worker/testing/text_corpus.h"

namespace dtrain::parallel {
namespace {

using pipeline::ScheduleKind;

constexpr int kSaved = 5;   // the step resumed from
constexpr int kSteps = 15;  // kSteps - kSaved = 10 steps compared

struct Layout {
  int dp, pp, tp;
  bool zero1 = false;
  int v = 1;
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  std::vector<int> cut =
      {};  // layers per pipeline stage (ParallelLayout.stage_layers); empty: even

  std::string Name() const {
    std::string s = absl::StrCat("dp", dp, "pp", pp, "tp", tp, zero1 ? "_zero1" : "");
    if (v > 1) absl::StrAppend(&s, "_v", v, "_", pipeline::ScheduleName(schedule));
    if (!cut.empty()) absl::StrAppend(&s, "_cut", absl::StrJoin(cut, ""));
    return s;
  }
};

TrainingRun Base() {
  static const std::string data =
      dtrain::testing::WriteTextCorpus(::testing::TempDir() + "/reshard.txt", 20000);
  TrainingRun o;
  o.model = {256, 16, 4, 4, 32};  // 4 heads: tp=4 divides them
  o.data_path = data;
  o.steps = kSteps;
  o.batch = 8;
  o.seq = 16;
  o.optimizer.max_lr = 3e-3f;
  o.optimizer.warmup_steps = 3;
  o.optimizer.grad_clip = 1.0f;
  return o;
}

// The losses of steps 1.. of a run of `l` (rank 0's), with `adjust` applied to every rank's
// options.
std::vector<double> RunJob(const Layout& l, const std::function<void(TrainingRun&)>& adjust) {
  const int n = l.dp * l.pp * l.tp;
  comm::InprocHub hub(n);
  std::vector<std::vector<double>> losses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto backend = kernels::CreateBackend(dtrain::testing::TestDevice(), 1).value();
      ParallelTrainingOptions o;
      o.run = Base();
      adjust(o.run);
      ParallelLayout layout;
      layout.set_dp(l.dp);
      layout.set_pp(l.pp);
      layout.set_tp(l.tp);
      layout.set_schedule(pipeline::ScheduleName(l.schedule));
      layout.set_virtual_stages(l.v);
      layout.set_bucket_bytes(4096);
      layout.set_zero1(l.zero1);
      o.plan = PlannedRank(layout, o.run.batch, 1, r);
      if (!l.cut.empty()) {  // this rank's stage's layers, as the job plan's stages give them
        const int stage = r / l.tp % l.pp;
        int first = 0;
        for (int s = 0; s < stage; ++s) first += l.cut[s];
        LayerRange& chunk = *o.plan.add_chunks();
        chunk.set_first_layer(first);
        chunk.set_num_layers(l.cut[stage]);
      }
      o.comm_timeout = absl::Seconds(30);
      auto t = ParallelTrainer::Create(backend.get(), hub.transport(r), o);
      ASSERT_TRUE(t.ok()) << l.Name() << " rank " << r << ": " << t.status();
      absl::Status s = (*t)->Run({[&](const TrainStepMetrics& m) {
        losses[r].push_back(m.loss);
        return absl::OkStatus();
      }});
      EXPECT_TRUE(s.ok()) << l.Name() << " rank " << r << ": " << s;
    });
  }
  for (auto& t : threads) t.join();
  return losses[0];
}

// Returns the largest relative difference (for the log).
double ExpectSameLosses(const std::vector<double>& resumed, const std::vector<double>& whole,
                        const std::string& what) {
  EXPECT_EQ(whole.size(), size_t{kSteps}) << what;
  EXPECT_EQ(resumed.size(), size_t{kSteps - kSaved}) << what;
  if (whole.size() != size_t{kSteps} || resumed.size() != size_t{kSteps - kSaved}) return 1;
  double worst = 0;
  for (int i = 0; i < kSteps - kSaved; ++i) {
    EXPECT_NEAR(resumed[i], whole[kSaved + i], 1e-5 * whole[kSaved + i])
        << what << ", step " << kSaved + i + 1;
    worst = std::max(worst, std::fabs(resumed[i] - whole[kSaved + i]) / whole[kSaved + i]);
  }
  return worst;
}

const std::vector<Layout>& Targets() {
  static const auto* targets = new std::vector<Layout>{
      {1, 1, 1},
      {1, 1, 1, true},
      {2, 2, 1},
      {2, 2, 1, true},
      {1, 2, 2},
      {1, 2, 2, true},
      {1, 1, 4},
      {4, 1, 1},
      {4, 1, 1, true},
      {1, 2, 2, false, 2, ScheduleKind::kInterleaved},  // 4 chunks over 2 pipeline ranks
      {2, 2, 1, true, 1, ScheduleKind::kZeroBubbleH1},
  };
  return *targets;
}

class ReshardTest : public ::testing::TestWithParam<Layout> {};

TEST_P(ReshardTest, ResumesOnEveryLayoutWithTheLossesOfTheRunThatGoesOn) {
  const Layout from = GetParam();
  const std::string dir = absl::StrCat(::testing::TempDir(), "/reshard-", from.Name());
  const std::vector<double> whole = RunJob(from, [&](TrainingRun& o) {
    o.checkpoint_dir = dir;
    o.checkpoint_every = kSaved;
  });
  double worst = 0;
  for (const Layout& to : Targets()) {
    const std::vector<double> resumed = RunJob(
        to, [&](TrainingRun& o) { o.resume_from = absl::StrCat(dir, "/step_0000000", kSaved); });
    const std::string what = absl::StrCat(from.Name(), " -> ", to.Name());
    const double diff = ExpectSameLosses(resumed, whole, what);
    // The same layout continues bit for bit.
    if (to.Name() == from.Name()) {
      EXPECT_EQ(diff, 0.0) << what;
    }
    worst = std::max(worst, diff);
  }
  std::printf("%s step %d resumed on %zu layouts: worst relative loss difference %.2g\n",
              from.Name().c_str(), kSaved, Targets().size(), worst);
}

INSTANTIATE_TEST_SUITE_P(Sources, ReshardTest,
                         ::testing::Values(Layout{1, 1, 1}, Layout{1, 1, 1, true}, Layout{2, 2, 1},
                                           Layout{2, 2, 1, true}, Layout{1, 2, 2},
                                           Layout{1, 2, 2, true},
                                           Layout{1, 2, 2, false, 2, ScheduleKind::kInterleaved}),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           std::string s = info.param.Name();
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

// A rebalance (coordinator/policy/rebalance.h) moves a pipeline to another cut of the same
// stages: a step saved on 2,1,1 layers per stage resumes on 1,2,1 and 1,1,2, and on other
// layouts, with the losses of the run that goes on (within 1e-5 relative).
TEST(ReshardCut, ResumesOnAnotherCutOfTheSameStages) {
  const Layout from{1, 3, 1, false, 1, ScheduleKind::kOneFOneB, {2, 1, 1}};
  const std::string dir = absl::StrCat(::testing::TempDir(), "/reshard-", from.Name());
  const std::vector<double> whole = RunJob(from, [&](TrainingRun& o) {
    o.checkpoint_dir = dir;
    o.checkpoint_every = kSaved;
  });
  for (const Layout& to : {Layout{1, 3, 1, false, 1, ScheduleKind::kOneFOneB, {1, 2, 1}},
                           Layout{1, 3, 1, false, 1, ScheduleKind::kOneFOneB, {1, 1, 2}},
                           Layout{2, 1, 1}, Layout{1, 2, 2}}) {
    const std::vector<double> resumed = RunJob(
        to, [&](TrainingRun& o) { o.resume_from = absl::StrCat(dir, "/step_0000000", kSaved); });
    const double diff =
        ExpectSameLosses(resumed, whole, absl::StrCat(from.Name(), " -> ", to.Name()));
    std::printf("%s -> %s: worst relative loss difference %.2g\n", from.Name().c_str(),
                to.Name().c_str(), diff);
  }
}

// The one-worker trainer writes and reads the same format: its step resumes on (2,2,1) with
// ZeRO-1, and it resumes a (1,2,2) step.
TEST(LocalTrainerReshard, SavesAndResumesTheLayoutFreeFormat) {
  auto backend = kernels::CreateBackend(dtrain::testing::TestDevice(), 1).value();
  auto local_losses = [&](const std::function<void(TrainingRun&)>& adjust) {
    TrainingRun o = Base();
    adjust(o);
    std::vector<double> losses;
    auto t = LocalTrainer::Create(backend.get(), o);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return losses;
    const absl::Status s = (*t)->Run({[&](const TrainStepMetrics& m) {
      losses.push_back(m.loss);
      return absl::OkStatus();
    }});
    EXPECT_TRUE(s.ok()) << s;
    return losses;
  };
  const std::string local_dir = ::testing::TempDir() + "/reshard-local";
  const std::vector<double> whole = local_losses([&](TrainingRun& o) {
    o.checkpoint_dir = local_dir;
    o.checkpoint_every = kSaved;
  });
  EXPECT_TRUE(std::filesystem::exists(local_dir + "/step_00000005/manifest.json"));
  ExpectSameLosses(RunJob({2, 2, 1, true},
                          [&](TrainingRun& o) { o.resume_from = local_dir + "/step_00000005"; }),
                   whole, "local -> dp2pp2tp1_zero1");

  const std::string dir = ::testing::TempDir() + "/reshard-to-local";
  const std::vector<double> parallel = RunJob({1, 2, 2}, [&](TrainingRun& o) {
    o.checkpoint_dir = dir;
    o.checkpoint_every = kSaved;
  });
  ExpectSameLosses(local_losses([&](TrainingRun& o) { o.resume_from = dir + "/step_00000005"; }),
                   parallel, "dp1pp2tp2 -> local");
}

// The data must go on where it stopped: another global batch or seq_len is refused, naming both.
TEST(ReshardRefusals, AnotherBatchOrSeqLenIsRefusedSayingWhichToUse) {
  const std::string dir = ::testing::TempDir() + "/reshard-batch";
  RunJob({1, 1, 1}, [&](TrainingRun& o) {
    o.checkpoint_dir = dir;
    o.checkpoint_every = kSaved;
    o.steps = kSaved;
  });
  auto backend = kernels::CreateBackend(dtrain::testing::TestDevice(), 1).value();
  for (const auto& [batch, seq] : {std::pair{4, 16}, std::pair{8, 8}}) {
    TrainingRun o = Base();
    o.resume_from = dir;
    o.batch = batch;
    o.seq = seq;
    auto t = LocalTrainer::Create(backend.get(), o);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
    EXPECT_NE(t.status().message().find(absl::StrCat("trained with batch=8 seq_len=16 but the "
                                                     "job has batch=",
                                                     batch, " seq_len=", seq)),
              std::string::npos)
        << t.status();
    EXPECT_NE(t.status().message().find("resume with batch=8 seq_len=16"), std::string::npos);
  }
}

}  // namespace
}  // namespace dtrain::parallel
