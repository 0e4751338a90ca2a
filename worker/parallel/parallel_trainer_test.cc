// Every layout trains to one worker's numbers: dp, pp, tp in {1, 2} and (4,1,1), (1,4,1),
// (1,1,4), (2,2,2), each pipeline schedule, ZeRO-1 on and off. Ranks are threads over the
// in-process transport (the real-process runs over gRPC are in tests/integration/). The oracle
// is LocalTrainer on the same data, seed and batch: per-step losses within 1e-5 relative and
// final weights within kWeightTolerance; the recorded schedule trace (an order plan/ready_work.h
// allows, under ready work) and the peak of live activations are checked against the schedule's
// definition.
//
// The ranks' backend is DTRAIN_TEST_DEVICE ("cpu" when unset): parallel_trainer_staging_test
// runs this whole file on --device=cpu-staging, whose device memory only the backend may touch,
// so every tensor that reaches the transport or the checkpoint files must have been staged.
#include "worker/parallel/parallel_trainer.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "worker/comm/inproc/inproc_transport.h"
#include "worker/local_trainer.h"
#include "worker/model/checkpoint.h"
#include "worker/model/parameter_layout.h"
#include "worker/model/token_dataset.h"
#include "worker/parallel/threaded_ranks.h"
#include "worker/testing/file_snapshot.h"
#include "worker/testing/test_device.h"
#include "worker/testing/text_corpus.h"

namespace dtrain::parallel {
namespace {

using pipeline::ScheduleKind;

// Final weights: |parallel - single| <= kWeightTolerance * max|single| per tensor. Adam
// normalizes each update, so float-rounding differences in tiny gradients move a weight by up
// to lr per step; measured worst case over the matrix is stated in docs/PERFORMANCE.md.
constexpr double kWeightTolerance = 5e-4;

// The backend the parallel ranks train on (the single-worker reference is always "cpu").
std::unique_ptr<kernels::Backend> RankBackend() {
  return kernels::CreateBackend(dtrain::testing::TestDevice(), 1).value();
}

std::string WriteText(const std::string& name, int bytes) {
  return dtrain::testing::WriteTextCorpus(::testing::TempDir() + "/" + name, bytes);
}

TrainingRun Base() {
  static const std::string data = WriteText("equivalence.txt", 20000);
  TrainingRun o;
  o.model = {256, 16, 4, 4, 32};
  o.data_path = data;
  o.steps = 10;
  o.batch = 8;
  o.seq = 16;
  o.optimizer.max_lr = 3e-3f;
  o.optimizer.warmup_steps = 3;
  o.optimizer.grad_clip = 1.0f;  // active on the first steps: the global norm must be right
  return o;
}

struct Reference {
  std::vector<double> losses, grad_norms;
  model::GptConfig config;
  std::vector<float> params;  // the whole model
  model::ParameterLayout layout;
};

const Reference& SingleWorker() {
  static const Reference* ref = [] {
    auto* r = new Reference();
    auto backend = kernels::CreateBackend("cpu", 1).value();  // the reference: always the CPU
    auto trainer = LocalTrainer::Create(backend.get(), Base()).value();
    EXPECT_TRUE(trainer
                    ->Run({[&](const TrainStepMetrics& m) {
                      r->losses.push_back(m.loss);
                      r->grad_norms.push_back(m.grad_norm);
                      return absl::OkStatus();
                    }})
                    .ok());
    r->layout = trainer->model().layout();
    const float* p = trainer->model().params();
    r->params.assign(p, p + r->layout.total_size());
    return r;
  }();
  return *ref;
}

struct Case {
  int dp, pp, tp;
  ScheduleKind schedule;
  int v = 1;
  bool zero1 = false;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string s = absl::StrCat("dp", c.dp, "pp", c.pp, "tp", c.tp, "_",
                               pipeline::ScheduleName(c.schedule), c.zero1 ? "_zero1" : "");
  for (char& ch : s) {
    if (ch == '-') ch = '_';
  }
  return s;
}

struct RankResult {
  absl::Status status;
  std::vector<TrainStepMetrics> steps;
  std::vector<pipeline::Action> trace;
  int peak_live = 0;
  double max_weight_error = 0;  // relative to the tensor's max |value|
};

// A layout with every field set, as the job plan leaves it; buckets larger than the model
// (one bucket) unless a test sets them.
ParallelLayout Layout(int dp, int pp, int tp, ScheduleKind schedule = ScheduleKind::kOneFOneB,
                      int v = 1, bool zero1 = false) {
  ParallelLayout l;
  l.set_dp(dp);
  l.set_pp(pp);
  l.set_tp(tp);
  l.set_schedule(pipeline::ScheduleName(schedule));
  l.set_virtual_stages(v);
  l.set_bucket_bytes(1 << 20);
  l.set_zero1(zero1);
  return l;
}

// Rank `rank`'s options for case `c`: micro-batches of one row.
ParallelTrainingOptions OptionsFor(const Case& c, int rank) {
  ParallelTrainingOptions o;
  o.run = Base();
  o.plan = PlannedRank(Layout(c.dp, c.pp, c.tp, c.schedule, c.v, c.zero1), o.run.batch, 1, rank);
  o.comm_timeout = absl::Seconds(30);
  return o;
}

RankResult RunRank(const Case& c, comm::Transport* transport, int rank) {
  RankResult out;
  auto backend = RankBackend();
  ParallelTrainingOptions o = OptionsFor(c, rank);
  // Many buckets, so overlap and bucket edges are exercised.
  o.plan.mutable_layout()->set_bucket_bytes(4096);
  o.staging_chunk_bytes = 512;  // buckets and tp all-reduces in several staged chunks
  auto trainer = ParallelTrainer::Create(backend.get(), transport, o);
  if (!trainer.ok()) {
    out.status = trainer.status();
    return out;
  }
  out.status = (*trainer)->Run({[&](const TrainStepMetrics& m) {
    out.steps.push_back(m);
    return absl::OkStatus();
  }});
  out.trace = (*trainer)->last_trace();
  out.peak_live = (*trainer)->stats().peak_live_activations;
  // Compare every tensor this rank holds with the single worker's, shard by shard.
  const Reference& ref = SingleWorker();
  for (int j = 0; j < (*trainer)->num_chunks(); ++j) {
    model::GptStage& stage = (*trainer)->chunk(j);
    std::vector<float> params(stage.layout().total_size());  // device memory, copied to read
    EXPECT_TRUE(
        backend->CopyToHost(params.data(), stage.params(), params.size() * sizeof(float)).ok());
    for (const model::ParameterTensor& t : stage.layout().tensors()) {
      const model::ParameterTensor* whole = ref.layout.Find(t.name);
      std::vector<float> expected(t.local_size());
      EXPECT_TRUE(model::ExtractShard(
                      t, stage.tp(),
                      absl::MakeConstSpan(ref.params).subspan(whole->offset, whole->local_size()),
                      absl::MakeSpan(expected))
                      .ok());
      double max_abs = 1e-12, max_err = 0;
      for (int64_t i = 0; i < t.local_size(); ++i) {
        max_abs = std::max(max_abs, std::fabs(double{expected[i]}));
        max_err = std::max(max_err, std::fabs(double{params[t.offset + i]} - expected[i]));
      }
      out.max_weight_error = std::max(out.max_weight_error, max_err / max_abs);
    }
  }
  return out;
}

class EquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(EquivalenceTest, TrainsToTheSingleWorkerNumbers) {
  const Case c = GetParam();
  const Reference& ref = SingleWorker();
  const int n = c.dp * c.pp * c.tp;
  comm::InprocHub hub(n);
  std::vector<RankResult> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { results[r] = RunRank(c, hub.transport(r), r); });
  }
  for (auto& t : threads) t.join();

  const int m = Base().batch / c.dp;  // micro-batches of 1 row per replica
  const pipeline::ScheduleSpec spec{c.schedule, c.pp, m, c.v};
  for (int r = 0; r < n; ++r) {
    const RankResult& res = results[r];
    ASSERT_TRUE(res.status.ok()) << "rank " << r << ": " << res.status;
    ASSERT_EQ(res.steps.size(), ref.losses.size());
    for (size_t s = 0; s < ref.losses.size(); ++s) {
      EXPECT_NEAR(res.steps[s].loss, ref.losses[s], 1e-5 * ref.losses[s])
          << "rank " << r << " step " << s + 1;
      EXPECT_NEAR(res.steps[s].grad_norm, ref.grad_norms[s], 1e-4 * ref.grad_norms[s])
          << "rank " << r << " step " << s + 1;
    }
    EXPECT_LE(res.max_weight_error, kWeightTolerance) << "rank " << r;
    const int stage = (r / c.tp) % c.pp;
    // The order run: the list's, or under ready work (ZB-H1 with tp = 1) one its rules allow.
    const pipeline::Execution execution = pipeline::ChooseExecution(c.schedule, c.tp, std::nullopt);
    EXPECT_TRUE(pipeline::CheckExecutedTrace(spec, stage, execution, res.trace).ok())
        << "rank " << r << ": " << pipeline::CheckExecutedTrace(spec, stage, execution, res.trace);
    // Peak live activations: GPipe holds all m; 1F1B p - s on stage s.
    const int v = c.v;
    if (c.schedule == ScheduleKind::kGpipe) {
      EXPECT_EQ(res.peak_live, m) << "rank " << r;
    }
    if (c.schedule == ScheduleKind::kOneFOneB) {
      EXPECT_EQ(res.peak_live, std::min(m, c.pp - stage)) << "rank " << r;
    }
    // ZB-H1 keeps a micro-batch from its F to its deferred W: min(p, m) on every stage (the
    // 1F1B first-stage peak); what B frees is not counted here (schedule.cc).
    if (c.schedule == ScheduleKind::kZeroBubbleH1) {
      EXPECT_LE(res.peak_live, std::min(m, c.pp))
          << "rank " << r << ": " << pipeline::TraceToString(res.trace);
    }
    if (c.schedule == ScheduleKind::kInterleaved) {
      EXPECT_LE(res.peak_live, m * v);
    }
  }
}

std::vector<Case> Matrix() {
  std::vector<Case> cases;
  const ScheduleKind pipelined[] = {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB,
                                    ScheduleKind::kZeroBubbleH1};
  for (int dp : {1, 2}) {
    for (int pp : {1, 2}) {
      for (int tp : {1, 2}) {
        for (bool zero1 : {false, true}) {
          if (zero1 && dp == 1) continue;
          if (pp == 1) {
            cases.push_back({dp, pp, tp, ScheduleKind::kOneFOneB, 1, zero1});
            continue;
          }
          for (ScheduleKind s : pipelined) cases.push_back({dp, pp, tp, s, 1, zero1});
          cases.push_back({dp, pp, tp, ScheduleKind::kInterleaved, 2, zero1});
        }
      }
    }
  }
  cases.push_back({4, 1, 1, ScheduleKind::kOneFOneB, 1, false});
  cases.push_back({4, 1, 1, ScheduleKind::kOneFOneB, 1, true});
  for (ScheduleKind s : pipelined) cases.push_back({1, 4, 1, s, 1, false});
  cases.push_back({1, 1, 4, ScheduleKind::kOneFOneB, 1, false});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Layouts, EquivalenceTest, ::testing::ValuesIn(Matrix()), Name);

// Validation through the pipeline is forward only. On pp=2 x tp=2 (1F1B) and dp=2 x pp=2
// (interleaved, v=2), every rank's training losses and gradient norms are bit-identical to the
// same layout without evaluations, every rank reports the same val_loss after steps 5 and 10,
// and the last equals one worker's forward of the job's final weights (exported by rank 0)
// over the same validation batches, within 1e-5.
TEST(ParallelTrainer, EvaluationThroughThePipelineIsForwardOnly) {
  const std::string val = WriteText("pipeline_val.txt", 6000);
  for (const Case& c :
       {Case{1, 2, 2, ScheduleKind::kOneFOneB}, Case{2, 2, 1, ScheduleKind::kInterleaved, 2}}) {
    const int n = c.dp * c.pp * c.tp;
    const std::string name = absl::StrCat("eval_", c.dp, c.pp, c.tp);
    struct Result {
      std::vector<absl::Status> status;
      std::vector<std::vector<TrainStepMetrics>> steps;
    };
    auto train = [&](bool eval) {
      const std::string dir = absl::StrCat(absl::StripSuffix(::testing::TempDir(), "/"), "/", name,
                                           eval ? "_on" : "_off");
      comm::InprocHub hub(n);
      Result out{std::vector<absl::Status>(n), std::vector<std::vector<TrainStepMetrics>>(n)};
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
          auto backend = RankBackend();
          ParallelTrainingOptions o = OptionsFor(c, r);
          o.run.checkpoint_dir = dir;
          o.run.save_path = dir + "/model.safetensors";
          if (eval) {
            o.run.eval_data_path = val;
            o.run.eval_every = 5;
            o.run.eval_batches = 2;
          }
          auto t = ParallelTrainer::Create(backend.get(), hub.transport(r), o);
          out.status[r] = t.status();
          if (!t.ok()) return;
          out.status[r] = (*t)->Run({[&](const TrainStepMetrics& m) {
            out.steps[r].push_back(m);
            return absl::OkStatus();
          }});
        });
      }
      for (auto& t : threads) t.join();
      return std::make_pair(out, dir);
    };
    const auto [off, off_dir] = train(false);
    const auto [on, on_dir] = train(true);
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(off.status[r].ok()) << name << " rank " << r << ": " << off.status[r];
      ASSERT_TRUE(on.status[r].ok()) << name << " rank " << r << ": " << on.status[r];
      ASSERT_EQ(on.steps[r].size(), off.steps[r].size());
      for (size_t s = 0; s < on.steps[r].size(); ++s) {
        EXPECT_EQ(on.steps[r][s].loss, off.steps[r][s].loss) << name << " rank " << r;
        EXPECT_EQ(on.steps[r][s].grad_norm, off.steps[r][s].grad_norm) << name << " rank " << r;
        EXPECT_EQ(on.steps[r][s].val_loss.has_value(), s == 4 || s == 9) << "step " << s + 1;
        if (on.steps[r][s].val_loss.has_value()) {
          EXPECT_EQ(*on.steps[r][s].val_loss, *on.steps[0][s].val_loss) << "rank " << r;
        }
      }
    }
    // One worker: the exported final weights, forward over validation batches 0 and 1.
    auto backend = kernels::CreateBackend("cpu", 1).value();
    const TrainingRun run = Base();
    auto stage =
        model::GptStage::Create(backend.get(), run.model, {0, run.model.n_layer, true, true},
                                model::TensorParallelSpec{})
            .value();
    ASSERT_TRUE(model::LoadWeights(on_dir + "/model.safetensors", *stage).ok());
    auto acts = stage->NewActivations(run.batch, run.seq).value();
    auto data = model::TokenDataset::Open(val, run.model.vocab_size).value();
    std::vector<int32_t> inputs(run.batch * run.seq), targets(run.batch * run.seq);
    double sum = 0;
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(
          data.GetBatch(k, run.batch, run.seq, absl::MakeSpan(inputs), absl::MakeSpan(targets))
              .ok());
      ASSERT_TRUE(stage->Forward(*acts, {inputs, targets, nullptr}).ok());
      sum += acts->MeanLoss().value();
    }
    EXPECT_NEAR(*on.steps[0].back().val_loss, sum / 2, 1e-5) << name;
  }
}

// With dp = 2 and small buckets, gradient buckets start reducing while backward still runs:
// the ready ranges of each block queue their buckets before the step's backward has ended. The
// two ranks share a host: on the CPU backend their gradients live in buffers both map, and the
// buckets are all-reduced in place.
TEST(ParallelTrainer, DataParallelBucketsStartDuringBackward) {
  comm::InprocHub hub(2);
  std::vector<ParallelRunStats> stats(2);
  std::vector<absl::Status> status(2);
  std::vector<bool> host_memory(2);
  std::vector<std::string> path(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto backend = RankBackend();
      host_memory[r] = backend->DeviceMemoryIsHostMemory();
      ParallelTrainingOptions o;
      o.run = Base();
      o.run.steps = 2;
      o.plan = PlannedRank(Layout(2, 1, 1), o.run.batch, 4, r);  // one micro-batch per replica
      o.plan.mutable_layout()->set_bucket_bytes(4096);
      auto t = ParallelTrainer::Create(backend.get(), hub.transport(r), o);
      status[r] = t.status();
      if (!t.ok()) return;
      status[r] = (*t)->Run({});
      stats[r] = (*t)->stats();
      path[r] = (*t)->dp_gradient_path();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    // On a backend that stages (cpu-staging here, CUDA) each bucket is copied into the shared
    // buffers and reduced there; on the CPU backend the gradients live in them.
    EXPECT_THAT(path[r], ::testing::HasSubstr(host_memory[r] ? "all-reduced in place"
                                                             : "copied to buffers the dp group"));
    // 4 blocks of 12.6k floats in 4 KiB buckets: dozens; all but the embedding's go early.
    EXPECT_GT(stats[r].reductions_started_in_backward, 10) << "rank " << r;
    EXPECT_GT(stats[r].dp_reduce_seconds, 0) << "rank " << r;
    EXPECT_TRUE(stats[r].dp_shared_buffers) << "rank " << r;
  }
}

// Two hosts with two data-parallel ranks each: the dp all-reduce goes through the hierarchy
// (inside each host, across the hosts, back), and training follows the flat ring's numbers (the
// sums differ only in the order of float additions).
TEST(ParallelTrainer, DataParallelOverTwoHostsIsHierarchicalWithTheFlatRingsLosses) {
  auto train = [](const std::vector<std::string>& hosts) {
    comm::InprocHub hub(4);
    std::vector<comm::Transport*> transports;
    for (int r = 0; r < 4; ++r) transports.push_back(hub.transport(r));
    return TrainRanksOnThreads(transports, [&](int rank) {
      ParallelTrainingOptions o;
      o.run = Base();
      o.run.steps = 3;
      o.plan = PlannedRank(Layout(4, 1, 1), o.run.batch, 2);  // one micro-batch per replica
      o.plan.mutable_layout()->set_bucket_bytes(64 << 10);
      o.rank_hosts = hosts;
      return o;
    });
  };
  absl::StatusOr<std::vector<RankRun>> flat = train({});
  absl::StatusOr<std::vector<RankRun>> hier =
      train({"10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"});
  ASSERT_TRUE(flat.ok()) << flat.status();
  ASSERT_TRUE(hier.ok()) << hier.status();
  for (int r = 0; r < 4; ++r) {
    EXPECT_FALSE((*flat)[r].stats.dp_hierarchical) << "rank " << r;
    EXPECT_TRUE((*hier)[r].stats.dp_hierarchical) << "rank " << r;
    EXPECT_FALSE((*hier)[r].stats.dp_shared_buffers) << "rank " << r;
  }
  ASSERT_EQ((*hier)[0].steps.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    const double want = (*flat)[0].steps[s].loss;
    EXPECT_NEAR((*hier)[0].steps[s].loss, want, 1e-5 * std::abs(want)) << "step " << s + 1;
  }
  // Rank hosts must name every rank.
  comm::InprocHub hub(4);
  auto backend = RankBackend();
  ParallelTrainingOptions o;
  o.run = Base();
  o.plan = PlannedRank(Layout(4, 1, 1), o.run.batch, 2);
  o.rank_hosts = {"10.0.0.1", "10.0.0.2"};
  auto t = ParallelTrainer::Create(backend.get(), hub.transport(0), o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), ::testing::HasSubstr("2 rank hosts for 4 ranks"));
}

// A rank that dies mid-run fails the others within the deadline, naming it; nobody hangs.
TEST(ParallelTrainer, APeerThatDiesFailsTheOthersNamingIt) {
  comm::InprocHub hub(4);
  std::vector<absl::Status> status(4);
  std::vector<std::thread> threads;
  const auto start = absl::Now();
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      auto backend = RankBackend();
      ParallelTrainingOptions o;
      o.run = Base();
      o.run.steps = 50;
      o.plan = PlannedRank(Layout(2, 2, 1), o.run.batch, 4, r);  // one micro-batch per replica
      o.comm_timeout = absl::Seconds(20);
      auto t = ParallelTrainer::Create(backend.get(), hub.transport(r), o);
      status[r] = t.status();
      if (!t.ok()) return;
      status[r] = (*t)->Run({[&](const TrainStepMetrics& m) {
        if (r == 3 && m.step == 3) {
          hub.Kill(3);
          return absl::AbortedError("rank 3 killed by the test");
        }
        return absl::OkStatus();
      }});
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << "survivors waited for a deadline";
  // Rank 2 (its pipeline neighbour) and rank 1 (its data-parallel peer) talk to rank 3; rank
  // 0 hears of it from rank 2's abort, which carries rank 2's error.
  for (int r : {0, 1, 2}) {
    EXPECT_FALSE(status[r].ok()) << "rank " << r;
    EXPECT_NE(status[r].message().find("rank 3 is gone"), std::string::npos)
        << "rank " << r << ": " << status[r];
  }
}

// Runs `c` with `n` threads; returns each rank's step metrics (rank order). `after` sees each
// rank's trainer once its run ended; `on_checkpoint` each rank's checkpoint reports.
std::vector<std::vector<TrainStepMetrics>> RunLayout(
    const Case& c, const std::function<void(ParallelTrainingOptions&)>& adjust,
    const std::function<void(int rank, const ParallelTrainer&)>& after = nullptr,
    const std::function<void(int rank, const CheckpointWritten&)>& on_checkpoint = nullptr,
    const std::function<void(int rank, const std::string&)>& on_warning = nullptr) {
  const int n = c.dp * c.pp * c.tp;
  comm::InprocHub hub(n);
  std::vector<std::vector<TrainStepMetrics>> steps(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto backend = RankBackend();
      ParallelTrainingOptions o = OptionsFor(c, r);
      adjust(o);
      auto t = ParallelTrainer::Create(backend.get(), hub.transport(r), o);
      ASSERT_TRUE(t.ok()) << t.status();
      TrainingCallbacks callbacks;
      callbacks.step = [&](const TrainStepMetrics& m) {
        steps[r].push_back(m);
        return absl::OkStatus();
      };
      if (on_checkpoint) {
        callbacks.checkpoint = [&, r](const CheckpointWritten& w) { on_checkpoint(r, w); };
      }
      if (on_warning) callbacks.warning = [&, r](const std::string& w) { on_warning(r, w); };
      absl::Status s = (*t)->Run(callbacks);
      EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
      if (after) after(r, **t);
    });
  }
  for (auto& t : threads) t.join();
  return steps;
}

// A run resumed from its sharded checkpoint at step 5 continues bit for bit as the run that
// never stopped (weights, AdamW moments and step, ZeRO-1 shards, every rank's files).
TEST(ParallelTrainer, ResumeFromShardsIsBitIdentical) {
  for (const Case& c : {Case{2, 2, 1, ScheduleKind::kOneFOneB, 1, true},
                        Case{1, 2, 2, ScheduleKind::kInterleaved, 2, false}}) {
    const std::string dir = ::testing::TempDir() + "/resume-" + Name({c, 0});
    auto whole = RunLayout(c, [&](ParallelTrainingOptions& o) {
      o.run.checkpoint_dir = dir;
      o.run.checkpoint_every = 5;
    });
    auto resumed = RunLayout(
        c, [&](ParallelTrainingOptions& o) { o.run.resume_from = dir + "/step_00000005"; });
    ASSERT_EQ(whole[0].size(), 10u);
    ASSERT_EQ(resumed[0].size(), 5u);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(resumed[0][i].step, whole[0][i + 5].step);
      EXPECT_EQ(resumed[0][i].loss, whole[0][i + 5].loss) << Name({c, 0}) << " step " << i + 6;
      EXPECT_EQ(resumed[0][i].grad_norm, whole[0][i + 5].grad_norm);
    }
  }
}

// TempDir() ends with a slash; the trainers report normalized absolute paths.
std::string TempPath(const std::string& name) {
  return absl::StrCat(absl::StripSuffix(::testing::TempDir(), "/"), "/", name);
}

const Case kPipeline2{1, 2, 1, ScheduleKind::kOneFOneB};
const Case kData2{2, 1, 1, ScheduleKind::kOneFOneB};

// The data loss: a resume with steps at or below the checkpoint's used to re-save the
// loaded step on one rank (deleting its manifest) while another rank was still loading it.
TEST(ParallelTrainer, StepsNotBeyondTheCheckpointAreRefusedOnEveryRankAndChangeNothing) {
  for (const Case& c : {kPipeline2, kData2}) {
    SCOPED_TRACE(Name({c, 0}));
    const std::string dir = TempPath("low-steps-" + Name({c, 0}));
    RunLayout(c, [&](ParallelTrainingOptions& o) {
      o.run.checkpoint_dir = dir;
      o.run.checkpoint_every = 5;
    });
    const std::map<std::string, std::string> before = dtrain::testing::SnapshotFiles(dir);
    ASSERT_EQ(before.at(dir + "/latest"), "step_00000010\n");
    const int n = c.dp * c.pp * c.tp;
    comm::InprocHub hub(n);
    for (int64_t steps : {10, 7}) {
      for (int r = 0; r < n; ++r) {
        auto backend = RankBackend();
        ParallelTrainingOptions o = OptionsFor(c, r);
        o.run.steps = steps;
        o.run.resume_from = dir;
        o.run.checkpoint_dir = dir;
        o.run.save_path = dir + "/model.safetensors";
        auto t = ParallelTrainer::Create(backend.get(), hub.transport(r), o);
        EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
        EXPECT_EQ(t.status().message(),
                  absl::StrCat("steps=", steps, " is not beyond step 10 of the checkpoint ", dir,
                               "/step_00000010 (resume_from): there is nothing to train; set "
                               "steps above 10"));
      }
    }
    EXPECT_EQ(dtrain::testing::SnapshotFiles(dir), before);
  }
}

TEST(ParallelTrainer, ReportsTheStepsItWritesSealedOnRankZeroAndNeverALoadedOne) {
  for (const Case& c : {kPipeline2, kData2}) {
    SCOPED_TRACE(Name({c, 0}));
    const int n = c.dp * c.pp * c.tp;
    const std::string dir = TempPath("reports-" + Name({c, 0}));
    std::vector<std::vector<CheckpointWritten>> written(n);
    auto record = [&](int r, const CheckpointWritten& w) { written[r].push_back(w); };
    RunLayout(
        c,
        [&](ParallelTrainingOptions& o) {
          o.run.checkpoint_dir = dir;
          o.run.checkpoint_every = 5;
        },
        nullptr, record);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(written[r].size(), 2u) << "rank " << r;
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(written[r][i].step, 5 * (i + 1));
        EXPECT_EQ(written[r][i].dir, absl::StrCat(dir, "/", StepDirName(5 * (i + 1))));
        EXPECT_EQ(written[r][i].sealed, r == 0) << "rank " << r;
      }
    }

    // Resumed from step 5 into its own directory: step 10 is written, step 5 only read.
    for (auto& w : written) w.clear();
    const std::string resumed_dir = TempPath("reports-resumed-" + Name({c, 0}));
    RunLayout(
        c,
        [&](ParallelTrainingOptions& o) {
          o.run.resume_from = dir + "/step_00000005";
          o.run.checkpoint_dir = resumed_dir;
          o.run.save_path = resumed_dir + "/model.safetensors";
        },
        [&](int r, const ParallelTrainer& t) {
          EXPECT_EQ(t.start_step(), 5);
          EXPECT_EQ(t.resumed_from(), dir + "/step_00000005") << "rank " << r;
        },
        record);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(written[r].size(), 1u) << "rank " << r;
      EXPECT_EQ(written[r][0].step, 10);
      EXPECT_EQ(written[r][0].dir, resumed_dir + "/step_00000010");
    }
    EXPECT_TRUE(std::filesystem::exists(resumed_dir + "/model.safetensors"));
    EXPECT_TRUE(std::filesystem::exists(dir + "/step_00000005/manifest.json"));
  }
}

// Every file of `dir` but the ranks' entries (they hold each run's token), keyed by its path
// inside `dir`.
// The files of the steps and `latest`: not the rank entries or the run's claim (DIR/run), whose
// run token is new for each run.
std::map<std::string, std::string> StepFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& [path, bytes] : dtrain::testing::SnapshotFiles(dir)) {
    if (absl::EndsWith(path, ".entries.json") || path == dir + "/run") continue;
    files[path.substr(dir.size())] = bytes;
  }
  return files;
}

// Written while training goes on or with training waiting, a checkpoint is the same bytes,
// and training the same numbers.
TEST(ParallelTrainer, BackgroundAndForegroundCheckpointsAreTheSameFiles) {
  for (const Case& c : {kPipeline2, Case{2, 1, 2, ScheduleKind::kOneFOneB, 1, true}}) {
    SCOPED_TRACE(Name({c, 0}));
    std::map<std::string, std::string> files[2];
    std::vector<std::vector<TrainStepMetrics>> steps[2];
    for (bool background : {false, true}) {
      const std::string dir = TempPath(absl::StrCat("writes-", background, "-", Name({c, 0})));
      std::vector<int64_t> sealed;
      steps[background] = RunLayout(
          c,
          [&](ParallelTrainingOptions& o) {
            o.run.checkpoint_dir = dir;
            o.run.checkpoint_every = 1;
            o.run.background_checkpoints = background;
          },
          nullptr,
          [&](int r, const CheckpointWritten& w) {
            if (r == 0 && w.sealed) sealed.push_back(w.step);
          });
      EXPECT_THAT(sealed, ::testing::ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
      files[background] = StepFiles(dir);
      EXPECT_EQ(files[background].at("/latest"), "step_00000010\n");
    }
    EXPECT_EQ(files[0].size(), files[1].size());
    for (const auto& [path, bytes] : files[0]) EXPECT_TRUE(files[1].at(path) == bytes) << path;
    for (size_t i = 0; i < steps[0][0].size(); ++i) {
      EXPECT_EQ(steps[0][0][i].loss, steps[1][0][i].loss) << "step " << i + 1;
    }
  }
}

// The acceptance's "the newest checkpoint corrupted": every rank resumes from the sealed step
// before it, says so, and continues bit for bit as the run that never stopped.
TEST(ParallelTrainer, DamagedNewestStepResumesFromThePreviousAndSaysSo) {
  const Case c = kData2;
  const std::string dir = TempPath("damaged-" + Name({c, 0}));
  auto whole = RunLayout(c, [&](ParallelTrainingOptions& o) {
    o.run.checkpoint_dir = dir;
    o.run.checkpoint_every = 5;
  });
  // Flip one byte of one of step 10's files.
  std::string damaged;
  for (const auto& [path, bytes] : dtrain::testing::SnapshotFiles(dir + "/step_00000010")) {
    if (!absl::EndsWith(path, ".safetensors")) continue;
    damaged = path.substr(path.rfind('/') + 1);
    std::string changed = bytes;
    changed[changed.size() / 2] ^= 1;
    ASSERT_TRUE(WriteFileAtomically(path, changed).ok());
    break;
  }
  ASSERT_FALSE(damaged.empty());
  const int n = c.dp * c.pp * c.tp;
  std::vector<std::vector<std::string>> warnings(n);
  // A recovery goes on in the same directory: step 10 is written and sealed again.
  auto resumed = RunLayout(
      c,
      [&](ParallelTrainingOptions& o) {
        o.run.resume_from = dir;
        o.run.checkpoint_dir = dir;
        o.run.checkpoint_every = 5;
      },
      [&](int r, const ParallelTrainer& t) {
        EXPECT_EQ(t.start_step(), 5) << "rank " << r;
        EXPECT_EQ(t.resumed_from(), dir + "/step_00000005") << "rank " << r;
      },
      nullptr, [&](int r, const std::string& w) { warnings[r].push_back(w); });
  for (int r = 0; r < n; ++r) {
    EXPECT_THAT(warnings[r], ::testing::ElementsAre(
                                 absl::StrCat("step_00000010 is damaged (", damaged,
                                              ": checksum differs); resuming from step_00000005")));
  }
  ASSERT_EQ(resumed[0].size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(resumed[0][i].loss, whole[0][i + 5].loss) << "step " << i + 6;
  }
  EXPECT_TRUE(VerifySealedStep(dir + "/step_00000010").ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/damaged-step_00000010/" + damaged));
}

// The trainer trusts its RankPlan and checks what only its process holds: the transport it was
// given is the plan's rank of the plan's size.
TEST(ParallelTrainer, ATransportOfAnotherSizeThanThePlanIsInvalidArgument) {
  comm::InprocHub hub(3);
  auto backend = RankBackend();
  ParallelTrainingOptions o;
  o.run = Base();
  o.plan = PlannedRank(Layout(2, 1, 1), o.run.batch, 4);
  auto t = ParallelTrainer::Create(backend.get(), hub.transport(0), o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(),
            "the transport has rank 0 of 3 but the trainer was given rank 0 of dp=2 pp=1 tp=1 (2 "
            "ranks)");
}

}  // namespace
}  // namespace dtrain::parallel
