// Sharded checkpoints (format version 2, layout-free) against the one-worker file: every
// layout's export is byte for byte the file model::SaveTensors writes for the whole model,
// resume restores parameters, moments and steps exactly on the same layout and on any other,
// and damaged, incomplete, mismatched or old (version 1) checkpoints are refused by name. The
// trainers' resume on other layouts is sharded_checkpoint_reshard_test.
#include "worker/parallel/sharded_checkpoint.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "plan/memory.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"
#include "worker/model/checkpoint.h"
#include "worker/model/init.h"
#include "worker/parallel/manifest.h"
#include "worker/testing/file_snapshot.h"

namespace dtrain::parallel {
namespace {

using model::AdamW;
using model::GptStage;
using ::testing::HasSubstr;

constexpr model::GptConfig kTiny{/*vocab_size=*/64, /*context=*/16, /*n_layer=*/4,
                                 /*n_head=*/4, /*n_embd=*/32};
constexpr uint64_t kSeed = 7;

struct JobLayout {
  int dp = 1, pp = 1, tp = 1, v = 1;
  bool zero1 = false;
  std::string Name() const {
    return absl::StrCat("dp", dp, "_pp", pp, "_tp", tp, "_v", v, zero1 ? "_zero1" : "");
  }
};

void PrintTo(const JobLayout& l, std::ostream* os) { *os << l.Name(); }

// comm::RingSegment's cut: `count` into n near-equal parts, the first count % n one larger.
std::pair<int64_t, int64_t> Segment(int64_t count, int n, int i) {
  const int64_t base = count / n, extra = count % n;
  const int64_t begin = i * base + std::min<int64_t>(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

std::vector<float> Host(kernels::Backend* be, const float* p, int64_t n) {
  std::vector<float> h(n);
  if (n > 0) {
    EXPECT_TRUE(be->CopyToHost(h.data(), p, n * sizeof(float)).ok());
  }
  return h;
}

std::string ReadAll(const std::string& path) {
  absl::StatusOr<std::string> s = ReadFileToString(path);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

void WriteAll(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

// A fresh directory under TEST_TMPDIR.
std::string TempDir(const std::string& name) {
  static int counter = 0;
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, "_", counter++);
  EXPECT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
  return dir;
}

// One rank of a job: its identity, chunks and optimizers, built as the trainer builds them.
struct Rank {
  ShardIdentity id;
  std::vector<std::unique_ptr<GptStage>> stages;
  std::vector<std::unique_ptr<AdamW>> opts;
  std::vector<GptStage*> chunks() const {
    std::vector<GptStage*> v;
    for (const auto& s : stages) v.push_back(s.get());
    return v;
  }
  std::vector<AdamW*> optimizers() const {
    std::vector<AdamW*> v;
    for (const auto& o : opts) v.push_back(o.get());
    return v;
  }
};

// Every rank of `layout`. Chunk j of pipeline rank p is model chunk j * pp + p; the layers are
// split evenly, or by `layers` (one count per model chunk) when given. With `fill`, the
// parameters are GPT-2's init and the moments and AdamW step distinct nonzero values that
// depend on `salt`; without, everything is zero.
std::vector<Rank> BuildJob(kernels::Backend* be, const model::GptConfig& config, const JobLayout& l,
                           bool fill, float salt = 0.0f, std::vector<int> layers = {}) {
  const int chunks = l.pp * l.v;
  if (layers.empty()) layers.assign(chunks, config.n_layer / chunks);
  std::vector<Rank> ranks;
  for (int d = 0; d < l.dp; ++d) {
    for (int p = 0; p < l.pp; ++p) {
      for (int t = 0; t < l.tp; ++t) {
        Rank r;
        r.id = {d, p, t, l.dp, l.pp, l.tp, l.v, l.zero1};
        for (int j = 0; j < l.v; ++j) {
          const int m = j * l.pp + p;
          int first = 0;
          for (int k = 0; k < m; ++k) first += layers[k];
          const model::StageSpec spec{first, layers[m], m == 0, m == chunks - 1};
          auto stage = GptStage::Create(be, config, spec, {t, l.tp},
                                        [](float*, int64_t) { return absl::OkStatus(); });
          EXPECT_TRUE(stage.ok()) << stage.status();
          const int64_t total = (*stage)->layout().total_size();
          const auto [begin, end] =
              l.zero1 ? Segment(total, l.dp, d) : std::pair<int64_t, int64_t>{0, total};
          auto opt = AdamW::CreateForRange(be, (*stage)->layout(), {}, begin, end);
          EXPECT_TRUE(opt.ok()) << opt.status();
          if (fill) {
            // Parameters: GPT-2's init, the same on every layout. Moments: a value per element
            // of each global tensor, so that ranks holding the same element (tp replicas, the
            // head's tied copy of wte) hold the same moments, as the trainer keeps them.
            EXPECT_TRUE(model::InitializeGpt2(**stage, kSeed).ok());
            std::vector<float> m1(total), m2(total);
            for (const model::ParameterTensor& pt : (*stage)->layout().tensors()) {
              const float tensor_salt = 0.01f * (std::hash<std::string>()(pt.name) % 97);
              const TensorShard piece{pt.name, pt.global_shape, model::ShardBoxes(pt, {t, l.tp}), 0,
                                      pt.local_size()};
              const std::vector<ShardRun> runs = ShardRuns(piece, "test").value();
              for (const ShardRun& run : runs) {
                for (int64_t k = 0; k < run.size; ++k) {
                  const int64_t g = run.global + k;
                  m1[pt.offset + run.stored + k] = 1e-3f * (g + 1) + tensor_salt + salt;
                  m2[pt.offset + run.stored + k] = 1e-4f * (g + 1) + tensor_salt + salt;
                }
              }
            }
            EXPECT_TRUE(
                opt->exp_avg().CopyFrom(absl::MakeSpan(m1).subspan(begin, end - begin)).ok());
            EXPECT_TRUE(
                opt->exp_avg_sq().CopyFrom(absl::MakeSpan(m2).subspan(begin, end - begin)).ok());
            opt->set_step(100 + static_cast<int64_t>(salt));
          }
          r.stages.push_back(std::move(stage).value());
          r.opts.push_back(std::make_unique<AdamW>(std::move(opt).value()));
        }
        ranks.push_back(std::move(r));
      }
    }
  }
  return ranks;
}

absl::Status SaveShards(const std::string& dir, int64_t step, const std::vector<Rank>& ranks) {
  for (const Rank& r : ranks) {
    absl::Status s = SaveShard(dir, step, r.id, r.chunks(), r.optimizers());
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SaveJob(const std::string& dir, int64_t step, const std::vector<Rank>& ranks,
                     const model::GptConfig& config = kTiny) {
  absl::Status s = SaveShards(dir, step, ranks);
  if (!s.ok()) return s;
  return WriteManifest(dir, step, ranks[0].id.layout(), config, DataPositionAfter(step, 8, 16));
}

// LoadShard without the data position check (these tests train nothing).
absl::StatusOr<int64_t> Load(const std::string& path, const ShardIdentity& id,
                             absl::Span<GptStage* const> chunks,
                             absl::Span<AdamW* const> optimizers) {
  return LoadShard(path, id, chunks, optimizers, DataPosition{});
}

void ExpectSameState(kernels::Backend* be, const std::vector<Rank>& want,
                     const std::vector<Rank>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t r = 0; r < want.size(); ++r) {
    for (size_t j = 0; j < want[r].stages.size(); ++j) {
      SCOPED_TRACE(absl::StrCat("rank ", r, " chunk ", j));
      GptStage& a = *want[r].stages[j];
      GptStage& b = *got[r].stages[j];
      const int64_t n = a.layout().total_size();
      EXPECT_EQ(Host(be, a.params(), n), Host(be, b.params(), n));
      AdamW& oa = *want[r].opts[j];
      AdamW& ob = *got[r].opts[j];
      const int64_t k = oa.range_end() - oa.range_begin();
      EXPECT_EQ(Host(be, oa.exp_avg().data(), k), Host(be, ob.exp_avg().data(), k));
      EXPECT_EQ(Host(be, oa.exp_avg_sq().data(), k), Host(be, ob.exp_avg_sq().data(), k));
      EXPECT_EQ(oa.step(), ob.step());
    }
  }
}

class ShardedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = kernels::CreateBackend("cpu", 1);
    ASSERT_TRUE(backend.ok()) << backend.status();
    be_ = std::move(backend).value();
  }

  // The one-worker reference: the whole model, initialized and saved by model::SaveTensors.
  std::string Reference(int64_t step) {
    auto whole = GptStage::Create(be_.get(), kTiny, {0, kTiny.n_layer, true, true}, {});
    EXPECT_TRUE(whole.ok()) << whole.status();
    EXPECT_TRUE(model::InitializeGpt2(**whole, kSeed).ok());
    const std::string path = TempDir("reference") + "/model.safetensors";
    EXPECT_TRUE(
        model::SaveTensors(path, **whole, (*whole)->params(), {{"step", absl::StrCat(step)}}).ok());
    return ReadAll(path);
  }

  std::unique_ptr<kernels::Backend> be_;
};

class LayoutTest : public ShardedCheckpointTest, public ::testing::WithParamInterface<JobLayout> {};

TEST_P(LayoutTest, ExportMatchesOneWorkerAndResumeRoundTrips) {
  const JobLayout l = GetParam();
  const std::string dir = TempDir(l.Name());
  std::vector<Rank> job = BuildJob(be_.get(), kTiny, l, /*fill=*/true);
  ASSERT_TRUE(SaveJob(dir, 12, job).ok());
  EXPECT_EQ(ReadAll(dir + "/latest"), "step_00000012\n");

  absl::StatusOr<Manifest> manifest = ReadManifest(dir);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  const int model_files = l.pp * l.tp * l.v;
  const int optimizer_files = (l.zero1 ? l.dp : 1) * l.pp * l.tp * l.v;
  ASSERT_EQ(manifest->files.size(), model_files + optimizer_files);
  for (const ShardFile& f : manifest->files) {
    const std::string bytes = ReadAll(dir + "/step_00000012/" + f.FileName());
    EXPECT_EQ(f.bytes, static_cast<int64_t>(bytes.size())) << f.FileName();
    EXPECT_EQ(f.checksum, ShardChecksum(bytes)) << f.FileName();
  }

  // Export, from DIR and from the step directory: exactly the one-worker file.
  const std::string reference = Reference(12);
  for (const std::string& from : {dir, dir + "/step_00000012"}) {
    const std::string out = dir + "/export.safetensors";
    absl::StatusOr<model::CheckpointStep> s = ExportSafetensors(from, out);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->step, 12);
    EXPECT_EQ(s->step_dir, dir + "/step_00000012");
    EXPECT_TRUE(ReadAll(out) == reference) << "export of " << from << " differs";
  }

  // Resume into zeroed chunks: everything back, bit for bit.
  std::vector<Rank> resumed = BuildJob(be_.get(), kTiny, l, /*fill=*/false);
  for (Rank& r : resumed) {
    absl::StatusOr<int64_t> step = Load(dir, r.id, r.chunks(), r.optimizers());
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(*step, 12);
  }
  ExpectSameState(be_.get(), job, resumed);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LayoutTest,
    ::testing::Values(JobLayout{1, 2, 2, 1, false},  // pp=2, tp=2
                      JobLayout{1, 2, 1, 2, false},  // pp=2, two interleaved chunks each
                      JobLayout{1, 1, 1, 2, false},  // one rank, two chunks (wte twice)
                      JobLayout{2, 1, 1, 1, true},   // dp=2, ZeRO-1
                      JobLayout{2, 1, 2, 1, false},  // dp=2 without ZeRO, tp=2
                      JobLayout{2, 2, 2, 1, true}),  // all three, ZeRO-1
    [](const ::testing::TestParamInfo<JobLayout>& info) { return info.param.Name(); });

TEST_F(ShardedCheckpointTest, LoadsWeightsWithoutOptimizers) {
  const std::string dir = TempDir("weights_only");
  const JobLayout l{1, 2, 2, 1, false};
  std::vector<Rank> job = BuildJob(be_.get(), kTiny, l, true);
  ASSERT_TRUE(SaveJob(dir, 3, job).ok());
  std::vector<Rank> fresh = BuildJob(be_.get(), kTiny, l, false);
  for (size_t r = 0; r < job.size(); ++r) {
    ASSERT_TRUE(Load(dir, fresh[r].id, fresh[r].chunks(), {}).ok());
    const int64_t n = job[r].stages[0]->layout().total_size();
    EXPECT_EQ(Host(be_.get(), job[r].stages[0]->params(), n),
              Host(be_.get(), fresh[r].stages[0]->params(), n));
  }
}

// A step of one layout loads into any other, and saved again from there and loaded back into
// the first layout, it is the original state bit for bit: parameters, both moments and the
// AdamW step, whatever the tp split of c_attn, the pipeline cut, the chunks or ZeRO-1 ranges.
TEST_F(ShardedCheckpointTest, AnyLayoutLoadsAStepAndSavesItBackExactly) {
  const std::vector<std::pair<JobLayout, JobLayout>> pairs = {
      {{2, 2, 2, 1, true}, {1, 1, 4, 1, false}},
      {{1, 1, 4, 1, false}, {4, 1, 1, 1, true}},
      {{1, 2, 2, 1, false}, {2, 1, 1, 2, true}},  // two chunks on one pipeline rank
      {{1, 1, 1, 1, false}, {2, 4, 1, 1, true}},
  };
  for (const auto& [a, b] : pairs) {
    SCOPED_TRACE(a.Name() + " -> " + b.Name());
    const std::string dir = TempDir(a.Name() + "_to_" + b.Name());
    std::vector<Rank> original = BuildJob(be_.get(), kTiny, a, /*fill=*/true, /*salt=*/3);
    ASSERT_TRUE(SaveJob(dir + "/a", 7, original).ok());
    std::vector<Rank> other = BuildJob(be_.get(), kTiny, b, /*fill=*/false);
    for (Rank& r : other) {
      ASSERT_EQ(Load(dir + "/a", r.id, r.chunks(), r.optimizers()).value_or(-1), 7);
    }
    ASSERT_TRUE(SaveJob(dir + "/b", 7, other).ok());
    // Both steps export the same model.
    ASSERT_TRUE(ExportSafetensors(dir + "/a", dir + "/a.safetensors").ok());
    ASSERT_TRUE(ExportSafetensors(dir + "/b", dir + "/b.safetensors").ok());
    EXPECT_TRUE(ReadAll(dir + "/a.safetensors") == ReadAll(dir + "/b.safetensors"));
    std::vector<Rank> back = BuildJob(be_.get(), kTiny, a, /*fill=*/false);
    for (Rank& r : back) {
      ASSERT_EQ(Load(dir + "/b", r.id, r.chunks(), r.optimizers()).value_or(-1), 7);
    }
    ExpectSameState(be_.get(), original, back);
  }
}

TEST_F(ShardedCheckpointTest, AnotherModelIsRefusedNamingWhatDiffers) {
  const std::string dir = TempDir("mismatch");
  ASSERT_TRUE(SaveJob(dir, 5, BuildJob(be_.get(), kTiny, {1, 2, 1, 1, false}, true)).ok());
  model::GptConfig wider = kTiny;
  wider.n_embd = 64;
  std::vector<Rank> job = BuildJob(be_.get(), wider, {1, 2, 1, 1, false}, false);
  absl::StatusOr<int64_t> step = Load(dir, job[0].id, job[0].chunks(), job[0].optimizers());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();
  EXPECT_THAT(step.status().message(),
              HasSubstr("checkpoint has n_embd=32 but the job has n_embd=64"));
}

// The plan's estimate of a checkpoint's host memory (plan/memory.h checkpoint_snapshot) against
// the files SnapshotShard really makes: per stage, the rank that stores the most. The estimate
// leaves out the files' headers (a few KiB; this model's tensors are small, so they weigh here)
// and bounds a zero1 rank's moments by its optimizer's share, tied copy included.
TEST_F(ShardedCheckpointTest, SnapshotIsWhatThePlanCountsForACheckpoint) {
  for (const JobLayout& l :
       {JobLayout{1, 1, 1, 1, false}, JobLayout{2, 2, 1, 1, false}, JobLayout{1, 2, 2, 1, false},
        JobLayout{2, 2, 2, 1, true}, JobLayout{1, 2, 1, 2, false}}) {
    SCOPED_TRACE(l.Name());
    std::vector<Rank> job = BuildJob(be_.get(), kTiny, l, false);
    JobSpec spec;
    spec.mutable_model()->set_vocab_size(kTiny.vocab_size);
    spec.mutable_model()->set_context(kTiny.context);
    spec.mutable_model()->set_n_layer(kTiny.n_layer);
    spec.mutable_model()->set_n_head(kTiny.n_head);
    spec.mutable_model()->set_n_embd(kTiny.n_embd);
    spec.set_device("cpu");
    spec.mutable_parallel()->set_dp(l.dp);
    spec.mutable_parallel()->set_pp(l.pp);
    spec.mutable_parallel()->set_tp(l.tp);
    spec.mutable_parallel()->set_zero1(l.zero1);
    for (int p = 0; p < l.pp; ++p) {
      std::vector<LayerRange> chunks(l.v);  // BuildJob's: chunk j is model chunk j * pp + p
      for (int j = 0; j < l.v; ++j) {
        chunks[j].set_first_layer((j * l.pp + p) * kTiny.n_layer / (l.pp * l.v));
        chunks[j].set_num_layers(kTiny.n_layer / (l.pp * l.v));
      }
      const RankMemory estimate =
          plan::EstimateRankMemory(spec, p, chunks, std::vector<int>(l.v, 1));
      int64_t most = 0, headers = 0;
      for (const Rank& r : job) {
        if (r.id.pp_rank != p) continue;
        absl::StatusOr<std::vector<PendingFile>> files =
            SnapshotShard(3, r.id, r.chunks(), r.optimizers());
        ASSERT_TRUE(files.ok()) << files.status();
        int64_t bytes = 0, header = 0;
        for (const PendingFile& f : *files) {
          uint64_t header_len = 0;
          std::memcpy(&header_len, f.bytes.data(), 8);
          bytes += f.bytes.size();
          header += 8 + header_len;
        }
        if (bytes > most) most = bytes, headers = header;
      }
      std::printf("%s stage %d: snapshot %lld bytes (%lld of headers), estimate %lld\n",
                  l.Name().c_str(), p, static_cast<long long>(most),
                  static_cast<long long>(headers),
                  static_cast<long long>(estimate.checkpoint_snapshot()));
      if (l.zero1) {  // a bound: the share of the optimizer, with the moments of the tied copy
        EXPECT_GE(estimate.checkpoint_snapshot(), most - headers);
        EXPECT_LE(estimate.checkpoint_snapshot(), (most - headers) * 11 / 10);
      } else {
        EXPECT_EQ(estimate.checkpoint_snapshot(), most - headers);
      }
      // A CPU rank's total counts it; the same job on CUDA does not (host memory there).
      spec.set_device("cuda");
      const RankMemory on_cuda =
          plan::EstimateRankMemory(spec, p, chunks, std::vector<int>(l.v, 1));
      spec.set_device("cpu");
      EXPECT_EQ(on_cuda.checkpoint_snapshot(), estimate.checkpoint_snapshot());
      EXPECT_EQ(estimate.total() - estimate.checkpoint_snapshot(),
                on_cuda.total() - on_cuda.device_scratch());
    }
  }
}

// SealStep takes the entries of every rank (as the background writer hands them over) and
// refuses a set that is not the whole step.
TEST_F(ShardedCheckpointTest, SealStepRefusesEntriesThatAreNotTheWholeStep) {
  const std::string dir = TempDir("seal");
  const JobLayout l{2, 2, 1, 1, true};
  std::vector<Rank> job = BuildJob(be_.get(), kTiny, l, true);
  const std::string step_dir = dir + "/step_00000003";
  ASSERT_EQ(mkdir(step_dir.c_str(), 0755), 0);
  std::vector<ShardFileEntry> entries;
  for (const Rank& r : job) {
    absl::StatusOr<std::vector<PendingFile>> files =
        SnapshotShard(3, r.id, r.chunks(), r.optimizers());
    ASSERT_TRUE(files.ok()) << files.status();
    for (PendingFile& f : *files) {
      EXPECT_EQ(f.entry.bytes(), 0);  // left to the writer
      EXPECT_FALSE(f.entry.has_xxh3_64());
      WriteAll(step_dir + "/" + f.name, f.bytes);
      f.entry.set_bytes(f.bytes.size());
      f.entry.set_xxh3_64(absl::StrFormat("%016x", ShardChecksum(f.bytes)));
      entries.push_back(f.entry);
    }
  }
  const DataPosition data = DataPositionAfter(3, 8, 16);
  const CheckpointLayout layout = job[0].id.layout();
  std::vector<ShardFileEntry> missing(entries.begin() + 1, entries.end());
  absl::Status s = SealStep(dir, 3, kTiny, layout, data, missing);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("no rank wrote " + entries[0].name()));
  std::vector<ShardFileEntry> short_one = entries;
  dtrain::TensorShard& t = *short_one.back().mutable_tensors(0);
  t.set_flat_end(t.flat_end() - 1);
  s = SealStep(dir, 3, kTiny, layout, data, short_one);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("its optimizer files hold"));
  EXPECT_FALSE(std::filesystem::exists(step_dir + "/manifest.json"));

  ASSERT_TRUE(SealStep(dir, 3, kTiny, layout, data, entries).ok());
  EXPECT_EQ(ReadAll(dir + "/latest"), "step_00000003\n");
  std::vector<Rank> resumed = BuildJob(be_.get(), kTiny, l, false);
  for (Rank& r : resumed) EXPECT_EQ(Load(dir, r.id, r.chunks(), r.optimizers()).value_or(-1), 3);
  ExpectSameState(be_.get(), job, resumed);
}

TEST_F(ShardedCheckpointTest, CorruptedOrTruncatedShardIsDataLossNamingTheFile) {
  const std::string dir = TempDir("corrupt");
  const JobLayout l{2, 2, 2, 1, true};
  std::vector<Rank> job = BuildJob(be_.get(), kTiny, l, true);
  ASSERT_TRUE(SaveJob(dir, 9, job).ok());
  // Rank (dp 0, pp 1, tp 1) reads model-pp1-tp1-c0; flip one byte in its data.
  const std::string model_file = dir + "/step_00000009/model-pp1-tp1-c0.safetensors";
  std::string bytes = ReadAll(model_file);
  bytes[bytes.size() / 2] ^= 0x01;
  WriteAll(model_file, bytes);
  std::vector<Rank> fresh = BuildJob(be_.get(), kTiny, l, false);
  const Rank& reader = fresh[3];
  ASSERT_EQ(reader.id.pp_rank, 1);
  ASSERT_EQ(reader.id.tp_rank, 1);
  absl::StatusOr<int64_t> step = Load(dir, reader.id, reader.chunks(), reader.optimizers());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kDataLoss) << step.status();
  EXPECT_THAT(step.status().message(), HasSubstr("model-pp1-tp1-c0.safetensors"));
  EXPECT_THAT(step.status().message(), HasSubstr("checksum"));
  // Ranks that do not read it still resume.
  EXPECT_TRUE(Load(dir, fresh[0].id, fresh[0].chunks(), fresh[0].optimizers()).ok());
  absl::Status exported = ExportSafetensors(dir, dir + "/out.safetensors").status();
  EXPECT_EQ(exported.code(), absl::StatusCode::kDataLoss) << exported;
  EXPECT_THAT(exported.message(), HasSubstr("model-pp1-tp1-c0.safetensors"));

  // A truncated optimizer shard of dp rank 1.
  const std::string opt_file = dir + "/step_00000009/optimizer-dp1-pp0-tp0-c0.safetensors";
  const std::string opt_bytes = ReadAll(opt_file);
  WriteAll(opt_file, opt_bytes.substr(0, opt_bytes.size() - 4));
  const Rank& dp1 = fresh[4];
  ASSERT_EQ(dp1.id.dp_rank, 1);
  step = Load(dir, dp1.id, dp1.chunks(), dp1.optimizers());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kDataLoss) << step.status();
  EXPECT_THAT(step.status().message(), HasSubstr("optimizer-dp1-pp0-tp0-c0.safetensors"));
  EXPECT_THAT(step.status().message(), HasSubstr("truncated"));
}

TEST_F(ShardedCheckpointTest, StepWithoutManifestIsNeverLoadedOrExported) {
  const std::string dir = TempDir("incomplete");
  const JobLayout l{1, 2, 1, 1, false};
  std::vector<Rank> job = BuildJob(be_.get(), kTiny, l, true);
  // One rank saved, the other did not: the manifest cannot be written.
  ASSERT_TRUE(SaveShard(dir, 4, job[0].id, job[0].chunks(), job[0].optimizers()).ok());
  absl::Status manifest =
      WriteManifest(dir, 4, job[0].id.layout(), kTiny, DataPositionAfter(4, 8, 16));
  EXPECT_EQ(manifest.code(), absl::StatusCode::kFailedPrecondition) << manifest;
  EXPECT_THAT(manifest.message(), HasSubstr("model-pp1-tp0-c0.safetensors is missing"));
  // Every rank saved, but no manifest: incomplete.
  ASSERT_TRUE(SaveShards(dir, 4, job).ok());
  for (const std::string& path : {dir + "/step_00000004", dir}) {
    absl::StatusOr<int64_t> step = Load(path, job[0].id, job[0].chunks(), job[0].optimizers());
    EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();
    EXPECT_THAT(step.status().message(),
                HasSubstr(path == dir ? "(step_00000004) were never sealed" : "no manifest.json"));
    absl::Status exported = ExportSafetensors(path, dir + "/out.safetensors").status();
    EXPECT_EQ(exported.code(), absl::StatusCode::kFailedPrecondition) << exported;
  }
  absl::StatusOr<int64_t> missing =
      Load(dir + "/nope", job[0].id, job[0].chunks(), job[0].optimizers());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ShardedCheckpointTest, LatestNamesTheNewestCompleteStepAndOlderStepsStayIntact) {
  const std::string dir = TempDir("latest");
  const JobLayout l{2, 2, 1, 1, true};
  std::vector<Rank> at2 = BuildJob(be_.get(), kTiny, l, true, /*salt=*/2);
  std::vector<Rank> at4 = BuildJob(be_.get(), kTiny, l, true, /*salt=*/4);
  ASSERT_TRUE(SaveJob(dir, 2, at2).ok());
  ASSERT_TRUE(SaveJob(dir, 4, at4).ok());
  // Step 6 is saved by every rank, but the job died before the manifest.
  ASSERT_TRUE(SaveShards(dir, 6, BuildJob(be_.get(), kTiny, l, true, 6)).ok());
  EXPECT_EQ(ReadAll(dir + "/latest"), "step_00000004\n");

  std::vector<Rank> from_latest = BuildJob(be_.get(), kTiny, l, false);
  std::vector<Rank> from_2 = BuildJob(be_.get(), kTiny, l, false);
  for (size_t r = 0; r < from_latest.size(); ++r) {
    Rank& a = from_latest[r];
    Rank& b = from_2[r];
    EXPECT_EQ(Load(dir, a.id, a.chunks(), a.optimizers()).value_or(-1), 4);
    EXPECT_EQ(Load(dir + "/step_00000002", b.id, b.chunks(), b.optimizers()).value_or(-1), 2);
  }
  ExpectSameState(be_.get(), at4, from_latest);
  ExpectSameState(be_.get(), at2, from_2);
  EXPECT_TRUE(ExportSafetensors(dir + "/step_00000002", dir + "/two.safetensors").ok());
  EXPECT_TRUE(ReadAll(dir + "/two.safetensors") == Reference(2));
}

TEST_F(ShardedCheckpointTest, ASealedStepIsNeverWrittenAgainByAnyRank) {
  const std::string dir = TempDir("resave");
  const JobLayout l{1, 2, 1, 1, false};
  ASSERT_TRUE(SaveJob(dir, 3, BuildJob(be_.get(), kTiny, l, true)).ok());
  const std::map<std::string, std::string> before = dtrain::testing::SnapshotFiles(dir);
  // Another state for the same step (another job, or a run that loaded step 3 and saves it).
  std::vector<Rank> other = BuildJob(be_.get(), kTiny, l, true, /*salt=*/5);
  for (const Rank& r : other) {
    absl::Status s = SaveShard(dir, 3, r.id, r.chunks(), r.optimizers());
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("will not overwrite " + dir +
                                       "/step_00000003: it is a "
                                       "sealed checkpoint"));
  }
  EXPECT_EQ(dtrain::testing::SnapshotFiles(dir), before);
  EXPECT_TRUE(ReadManifest(dir).ok());
}

TEST_F(ShardedCheckpointTest, AnUnsealedStepIsWrittenAgain) {
  const std::string dir = TempDir("unsealed");
  const JobLayout l{1, 2, 1, 1, false};
  std::vector<Rank> job = BuildJob(be_.get(), kTiny, l, true);
  ASSERT_TRUE(SaveShards(dir, 3, BuildJob(be_.get(), kTiny, l, true, /*salt=*/5)).ok());
  ASSERT_TRUE(SaveJob(dir, 3, job).ok());  // a save that did not finish, redone
  std::vector<Rank> resumed = BuildJob(be_.get(), kTiny, l, false);
  for (Rank& r : resumed) {
    EXPECT_EQ(Load(dir, r.id, r.chunks(), r.optimizers()).value_or(-1), 3);
  }
  ExpectSameState(be_.get(), job, resumed);
}

TEST_F(ShardedCheckpointTest, ADirectoryOfJobDirectoriesIsRefusedNamingThem) {
  const std::string dir = TempDir("jobs");
  const JobLayout l{1, 2, 1, 1, false};
  ASSERT_TRUE(SaveJob(dir + "/job-000002", 3, BuildJob(be_.get(), kTiny, l, true)).ok());
  ASSERT_TRUE(SaveJob(dir + "/job-000001", 2, BuildJob(be_.get(), kTiny, l, true)).ok());
  absl::Status s = ReadManifest(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr(dir + " holds the directories of jobs job-000001, "
                                           "job-000002 but no checkpoint of its own: name one "
                                           "of them"));
  absl::StatusOr<Manifest> named = ReadManifest(dir + "/job-000002");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->step, 3);
  EXPECT_EQ(ReadManifest(TempDir("empty")).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ShardedCheckpointTest, RefusesArgumentsThatDisagreeWithTheIdentity) {
  const std::string dir = TempDir("bad_args");
  std::vector<Rank> job = BuildJob(be_.get(), kTiny, {1, 1, 1, 2, false}, true);
  ShardIdentity id = job[0].id;
  std::vector<GptStage*> one_chunk = {job[0].stages[0].get()};
  std::vector<AdamW*> one_opt = {job[0].opts[0].get()};
  EXPECT_EQ(SaveShard(dir, 1, id, one_chunk, one_opt).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SaveShard(dir, 1, id, job[0].chunks(), one_opt).code(),
            absl::StatusCode::kInvalidArgument);
  id.tp = 2;  // the chunks are tp size 1
  EXPECT_EQ(SaveShard(dir, 1, id, job[0].chunks(), job[0].optimizers()).code(),
            absl::StatusCode::kInvalidArgument);
  id = job[0].id;
  id.pp_rank = 1;  // outside pp=1
  EXPECT_EQ(SaveShard(dir, 1, id, job[0].chunks(), job[0].optimizers()).code(),
            absl::StatusCode::kInvalidArgument);
}

// A step whose manifest says fnv1a64 (as dtrain wrote before issue 11) is verified with it.
TEST_F(ShardedCheckpointTest, FnvChecksumsAreVerified) {
  const std::string dir = TempDir("fnv");
  const JobLayout l{2, 2, 2, 1, true};
  std::vector<Rank> job = BuildJob(be_.get(), kTiny, l, true);
  ASSERT_TRUE(SaveJob(dir, 6, job).ok());
  const std::string step_dir = dir + "/step_00000006";
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  m->checksum = ChecksumKind::kFnv1a64;
  for (ShardFile& f : m->files) {
    f.checksum = ShardChecksum(ReadAll(step_dir + "/" + f.FileName()), ChecksumKind::kFnv1a64);
  }
  WriteAll(step_dir + "/manifest.json", ManifestToJson(*m).value());

  std::vector<Rank> resumed = BuildJob(be_.get(), kTiny, l, false);
  for (Rank& r : resumed) EXPECT_EQ(Load(dir, r.id, r.chunks(), r.optimizers()).value_or(-1), 6);
  ExpectSameState(be_.get(), job, resumed);
  const std::string model_file = step_dir + "/model-pp0-tp1-c0.safetensors";
  std::string bytes = ReadAll(model_file);
  bytes[bytes.size() - 3] ^= 0x10;
  WriteAll(model_file, bytes);
  const absl::Status s = ExportSafetensors(dir, dir + "/out2.safetensors").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("model-pp0-tp1-c0.safetensors: fnv1a64 checksum mismatch"));
}

// Old checkpoints are refused saying how to carry them over: a version 1 sharded step and a
// one-worker step of format version 1 (model.safetensors sealed by optimizer.safetensors).
TEST_F(ShardedCheckpointTest, OldCheckpointsAreRefusedSayingHowToCarryThemOver) {
  const std::string dir = TempDir("v1");
  const std::string step_dir = dir + "/step_00000012";
  ASSERT_EQ(mkdir(step_dir.c_str(), 0755), 0);
  WriteAll(step_dir + "/manifest.json", R"({
  "format": "dtrain-sharded-checkpoint", "version": 1, "step": 12, "checksum": "fnv1a64",
  "model": {"vocab_size": 64, "context": 16, "n_layer": 4, "n_head": 4, "n_embd": 32},
  "layout": {"dp": 2, "pp": 1, "tp": 1, "virtual_stages": 1, "zero1": true}, "files": []})");
  std::vector<Rank> job = BuildJob(be_.get(), kTiny, {1, 1, 1, 1, false}, false);
  absl::Status s = Load(step_dir, job[0].id, job[0].chunks(), job[0].optimizers()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("format version 1"));
  EXPECT_THAT(s.message(), HasSubstr("(dp=2 pp=1 tp=1 virtual_stages=1 zero1)"));
  EXPECT_THAT(s.message(), HasSubstr("Resume it with the dtrain version that wrote it and the "
                                     "same layout, or export it with that version"));
  EXPECT_EQ(ExportSafetensors(step_dir, dir + "/out.safetensors").status().code(),
            absl::StatusCode::kFailedPrecondition);

  const std::string one = TempDir("one_worker") + "/step_00000004";
  ASSERT_EQ(mkdir(one.c_str(), 0755), 0);
  ASSERT_TRUE(model::SaveTensors(one + "/model.safetensors", *job[0].stages[0],
                                 job[0].stages[0]->params(), {{"step", "4"}})
                  .ok());
  WriteAll(one + "/optimizer.safetensors", ReadAll(one + "/model.safetensors"));
  s = Load(one, job[0].id, job[0].chunks(), job[0].optimizers()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("one-worker checkpoint of format version 1"));
  EXPECT_THAT(s.message(), HasSubstr("init_checkpoint=" + one + "/model.safetensors"));
}

TEST(ManifestTest, ChecksumsAreXxh3AndFnv1a) {
  // XXH3_64bits with seed 0; "" is the reference implementation's published test vector.
  EXPECT_EQ(ShardChecksum(""), 0x2d06800538d394c2ull);
  EXPECT_EQ(ShardChecksum("a"), 0xe6c632b61e964e1full);
  EXPECT_EQ(ShardChecksum("foobar"), 0xd78fda63144c5c84ull);
  EXPECT_EQ(ShardChecksum("", ChecksumKind::kFnv1a64), 0xcbf29ce484222325ull);
  EXPECT_EQ(ShardChecksum("a", ChecksumKind::kFnv1a64), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(ShardChecksum("foobar", ChecksumKind::kFnv1a64), 0x85944171f73967e8ull);
}

Manifest OneFileManifest(ChecksumKind checksum) {
  Manifest m;
  m.step = 42;
  m.checksum = checksum;
  m.config = kTiny;
  m.layout = {2, 2, 2, 1, true};
  m.data = DataPositionAfter(42, 8, 16);
  ShardFile f;
  f.kind = ShardFileKind::kOptimizer;
  f.dp_rank = 1;
  f.pp_rank = 1;
  f.tp_rank = 0;
  f.stage = {2, 2, false, true};
  // Elements [10, 20) of tp rank 0's shard of c_attn's bias: 3 boxes of 48 (q, k, v halves).
  f.tensors.push_back(
      {"h.2.attn.c_attn.bias", {96}, {{{0}, {16}}, {{32}, {16}}, {{64}, {16}}}, 10, 20});
  f.adam_step = 42;
  f.bytes = 1234;
  f.checksum = 0xfedcba9876543210ull;
  m.files.push_back(f);
  ShardFile model = f;
  model.kind = ShardFileKind::kModel;
  model.dp_rank = 0;
  m.files.push_back(model);
  return m;
}

TEST(ManifestTest, JsonRoundTripsWithTheProtoFieldNames) {
  for (ChecksumKind kind : {ChecksumKind::kXxh3_64, ChecksumKind::kFnv1a64}) {
    const Manifest m = OneFileManifest(kind);
    absl::StatusOr<std::string> json = ManifestToJson(m);
    ASSERT_TRUE(json.ok()) << json.status();
    absl::StatusOr<Manifest> back = ParseManifest(*json, "manifest.json");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(ManifestToJson(*back).value(), *json);
    EXPECT_EQ(back->checksum, kind);
    EXPECT_EQ(back->files[0].FileName(), "optimizer-dp1-pp1-tp0-c0.safetensors");
    EXPECT_EQ(back->files[0].checksum, 0xfedcba9876543210ull);
    ASSERT_EQ(back->files[0].tensors.size(), 1u);
    EXPECT_EQ(back->files[0].tensors[0].boxes[2].offset[0], 64);
    EXPECT_EQ(back->files[0].tensors[0].flat_end, 20);
    EXPECT_EQ(back->data.consumed_sequences, 42 * 8);
    EXPECT_EQ(back->files[1].FileName(), "model-pp1-tp0-c0.safetensors");
  }
  const std::string json = ManifestToJson(OneFileManifest(ChecksumKind::kXxh3_64)).value();
  EXPECT_THAT(json, HasSubstr("\"format\": \"dtrain-sharded-checkpoint\""));
  EXPECT_THAT(json, HasSubstr("\"checksum\": \"xxh3_64\""));
  EXPECT_THAT(json, HasSubstr("\"xxh3_64\": \"fedcba9876543210\""));
  EXPECT_THAT(json, HasSubstr("\"zero1\": true"));
  EXPECT_THAT(json, HasSubstr("\"has_embedding\": false"));
  EXPECT_THAT(json, HasSubstr("\"n_embd\": 32"));
  EXPECT_THAT(json, HasSubstr("\"version\": 3"));
  EXPECT_THAT(json, ::testing::ContainsRegex("\"manifest_xxh3_64\": \"[0-9a-f]{16}\""));
  EXPECT_THAT(json, HasSubstr("\"consumed_sequences\": \"336\""));
  EXPECT_THAT(json, HasSubstr("\"tensor\": \"h.2.attn.c_attn.bias\""));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("fnv1a64")));
  // The model file's entry has no optimizer range.
  const std::string model_entry = json.substr(json.find("model-pp1-tp0-c0"));
  EXPECT_THAT(model_entry, ::testing::Not(HasSubstr("range_begin")));
}

// The geometry of stored arrays: c_attn's shard on tp rank 1 of 2 is 3 boxes (its halves of q,
// k and v), and a flat range of it maps to the right global elements.
TEST(ManifestTest, ShardRunsMapAStoredArrayIntoItsGlobalTensor) {
  // c_attn weight [2, 12] (C = 2... as a 2 x 12 matrix), tp rank 1 of 2: columns 2-3, 6-7, 10-11.
  TensorShard t{"w", {2, 12}, {{{0, 2}, {2, 2}}, {{0, 6}, {2, 2}}, {{0, 10}, {2, 2}}}, 0, 12};
  std::vector<ShardRun> runs = ShardRuns(t, "x").value();
  std::vector<std::tuple<int64_t, int64_t, int64_t>> got;
  for (const ShardRun& r : runs) got.emplace_back(r.global, r.stored, r.size);
  EXPECT_EQ(got, (std::vector<std::tuple<int64_t, int64_t, int64_t>>{
                     {2, 0, 2}, {6, 2, 2}, {10, 4, 2}, {14, 6, 2}, {18, 8, 2}, {22, 10, 2}}));
  EXPECT_EQ(StoredShape(t), (std::vector<int64_t>{2, 6}));
  // Its elements [3, 8): the second element of the k half of row 0, ...
  t.flat_begin = 3;
  t.flat_end = 8;
  got.clear();
  runs = ShardRuns(t, "x").value();
  for (const ShardRun& r : runs) got.emplace_back(r.global, r.stored, r.size);
  EXPECT_EQ(
      got, (std::vector<std::tuple<int64_t, int64_t, int64_t>>{{7, 0, 1}, {10, 1, 2}, {14, 3, 2}}));
  EXPECT_EQ(StoredShape(t), (std::vector<int64_t>{5}));
  // Copy into the whole tensor.
  TensorShard whole{"w", {2, 12}, {{{0, 0}, {2, 12}}}, 0, 24};
  std::vector<ShardRun> all = ShardRuns(whole, "x").value();
  ASSERT_EQ(all.size(), 1u);  // contiguous runs merge
  std::vector<float> values = {1, 2, 3, 4, 5}, out(24, 0);
  EXPECT_EQ(CopyOverlap(runs, values, all, absl::MakeSpan(out)), 5);
  EXPECT_EQ(out[7], 1);
  EXPECT_EQ(out[11], 3);
  EXPECT_EQ(out[15], 5);
  t.flat_end = 13;
  EXPECT_EQ(ShardRuns(t, "x").status().code(), absl::StatusCode::kDataLoss);
  t.flat_end = 8;
  t.boxes[1].offset[1] = 11;  // outside the 12 columns
  EXPECT_EQ(ShardRuns(t, "x").status().code(), absl::StatusCode::kDataLoss);
  // Manifests that are not GPT-2 tensors fail at once, whatever they claim.
  for (const TensorShard& bad : std::vector<TensorShard>{
           {"w", {0, 12}, {{{0, 0}, {0, 12}}}, 0, 0},                              // a dim of 0
           {"w", {int64_t{1} << 30, int64_t{1} << 30}, {{{0, 0}, {1, 1}}}, 0, 1},  // 2^60
           {"w", {2, 4}, {{{0, 0}, {2, 4}}, {{0, 0}, {2, 4}}}, 0, 16},             // twice as wide
           {"w", {2, 4}, {{{0, 0}, {2, 4}}}, -1, 3},                               // negative range
       }) {
    EXPECT_EQ(ShardRuns(bad, "x").status().code(), absl::StatusCode::kDataLoss) << bad.tensor;
  }
  // A range deep in a tensor starts at its own row.
  TensorShard deep{"w", {100000, 4}, {{{0, 0}, {100000, 4}}}, 399990, 399997};
  runs = ShardRuns(deep, "x").value();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].global, 399990);
  EXPECT_EQ(runs[0].size, 7);
}

// `json` with its manifest_xxh3_64 recomputed: what a writer who edits a manifest on purpose
// can do (docs/SECURITY.md).
std::string Reseal(std::string json) {
  const size_t key = json.find("\"manifest_xxh3_64\": \"");
  if (key == std::string::npos) return json;
  const size_t at = key + std::strlen("\"manifest_xxh3_64\": \"");
  json.replace(at, 16, "0000000000000000");
  json.replace(at, 16, absl::StrFormat("%016x", ShardChecksum(json)));
  return json;
}

TEST(ManifestTest, MalformedManifestsAreDataLossNamingThePath) {
  const auto parse = [](const std::string& json) {
    return ParseManifest(json, "dir/manifest.json").status();
  };
  const std::string good = ManifestToJson(OneFileManifest(ChecksumKind::kXxh3_64)).value();
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string json = good;
    const size_t at = json.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return Reseal(json.replace(at, from.size(), to));
  };
  for (const auto& [json, problem] : std::vector<std::pair<std::string, std::string>>{
           {"{\"format\": 3}", "not a manifest"},
           {"{\"format\": \"dtrain-sharded-checkpoint\", \"extra\": 1}", "extra"},
           {with("\"version\": 3", "\"version\": 4"), "version 4, expected"},
           {with("\"name\": \"model-pp1-tp0-c0.safetensors\"", "\"name\": \"../../etc/shadow\""),
            "files[1] (../../etc/shadow): entry name \"../../etc/shadow\" is not a plain file "
            "name (refused unopened)"},
           {with("\"checksum\": \"xxh3_64\"", "\"checksum\": \"md5\""), "unknown checksum \"md5\""},
           {with("\"xxh3_64\": \"fedcba9876543210\"", "\"xxh3_64\": \"fedcba98\""),
            "\"xxh3_64\" is missing or not 16 hex digits"},
           {with("\"flat_begin\"", "\"flat_begin_\""), "flat_begin_"},
           {with("\"kind\": \"optimizer\"", "\"kind\": \"adam\""), "unknown kind \"adam\""},
           {with("\"n_embd\": 32", "\"n_embd\": 0"), "model: "},
       }) {
    const absl::Status s = parse(json);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(s.message(), HasSubstr("dir/manifest.json")) << s;
    EXPECT_THAT(s.message(), HasSubstr(problem)) << s;
  }
}

// ReadVerifiedArrays reads a file a piece (4 MiB) at a time: arrays that span pieces, arrays
// not wanted, an empty one, all values exact; then a flipped byte is a checksum mismatch.
TEST(ManifestTest, VerifiedArraysSpanningPiecesArriveWhole) {
  const std::string dir = TempDir("pieces");
  std::vector<float> big(2500000), small(7), skipped(1500000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = 0.5f * i;
  for (size_t i = 0; i < small.size(); ++i) small[i] = -1.0f - i;
  ShardFile f;
  f.kind = ShardFileKind::kModel;
  const std::string path = dir + "/" + f.FileName();
  ASSERT_TRUE(model::WriteSafetensors(path,
                                      {{"a_skipped", {1500000}, skipped},
                                       {"b_big", {2500, 1000}, big},
                                       {"c_empty", {0}, {}},
                                       {"d_small", {7}, small}},
                                      {})
                  .ok());
  const std::string bytes = ReadAll(path);
  f.bytes = bytes.size();
  f.checksum = ShardChecksum(bytes);
  std::map<std::string, std::vector<float>> got;
  auto wanted = [](const std::string& name) { return name != "a_skipped"; };
  auto take = [&](const model::TensorInfo& info, absl::Span<const float> values) {
    got[info.name].assign(values.begin(), values.end());
    return absl::OkStatus();
  };
  ASSERT_TRUE(ReadVerifiedArrays(dir, f, ChecksumKind::kXxh3_64, wanted, take).ok());
  EXPECT_EQ(got.size(), 3u);
  EXPECT_TRUE(got["b_big"] == big);
  EXPECT_TRUE(got["c_empty"].empty());
  EXPECT_EQ(got["d_small"], small);

  std::string bad = bytes;
  bad[bad.size() - 100] ^= 0x01;
  WriteAll(path, bad);
  const absl::Status s = ReadVerifiedArrays(dir, f, ChecksumKind::kXxh3_64, wanted, take);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("xxh3_64 checksum mismatch"));
}

// The dtrain-export binary: usage errors, export, and a clear error for a bad checkpoint.
std::pair<int, std::string> RunTool(const std::string& args) {
  const std::string tool =
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/dtrain/worker/parallel/dtrain-export");
  FILE* pipe = popen(absl::StrCat(tool, " ", args, " 2>&1").c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST_F(ShardedCheckpointTest, ExportTool) {
  const std::string dir = TempDir("tool");
  ASSERT_TRUE(SaveJob(dir, 8, BuildJob(be_.get(), kTiny, {1, 2, 2, 1, false}, true)).ok());

  auto [code, out] = RunTool("");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, HasSubstr("usage: dtrain-export CHECKPOINT_DIR_OR_STEP_DIR OUT.safetensors"));
  std::tie(code, out) = RunTool(dir);
  EXPECT_EQ(code, 2);
  std::tie(code, out) = RunTool("--out=x " + dir);
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, HasSubstr("bad argument \"--out=x\""));

  std::tie(code, out) = RunTool(dir + " " + dir + "/whole.safetensors");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("dtrain-export: exported step 8 of " + dir + " to " + dir +
                             "/whole.safetensors"));
  EXPECT_TRUE(ReadAll(dir + "/whole.safetensors") == Reference(8));

  std::tie(code, out) = RunTool(dir + "/missing " + dir + "/x.safetensors");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("dtrain-export: error: NOT_FOUND: checkpoint " + dir +
                             "/missing does not exist"));
}

}  // namespace
}  // namespace dtrain::parallel

namespace dtrain::parallel {
namespace {

// Version 3 manifests checksum their own bytes: one flipped byte anywhere, or an edited AdamW
// step count, is DataLoss before any value is used; version 2 ones (no checksum) still parse.
TEST(ManifestTest, TheManifestsOwnChecksumFindsEveryAlteredByte) {
  const std::string good = ManifestToJson(OneFileManifest(ChecksumKind::kXxh3_64)).value();
  ASSERT_TRUE(ParseManifest(good, "m.json").ok());
  std::string edited = good;
  const size_t at = edited.find("\"adam_step\": \"42\"");
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, std::strlen("\"adam_step\": \"42\""), "\"adam_step\": \"1\"");
  absl::Status s = ParseManifest(edited, "m.json").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("m.json: its bytes have xxh3_64 "));
  EXPECT_THAT(s.message(), HasSubstr("the manifest was altered or damaged after it was sealed"));
  // Every byte flipped in turn: never accepted.
  int accepted = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    std::string flipped = good;
    flipped[i] ^= 0x01;
    accepted += ParseManifest(flipped, "m.json").ok();
  }
  EXPECT_EQ(accepted, 0);
  // Version 3 without its checksum is refused; version 2 without one is read.
  std::string bare = good;
  const size_t key = bare.find(",\n \"manifest_xxh3_64\"");
  ASSERT_NE(key, std::string::npos);
  bare.erase(key, bare.find('}', key) - key - 1);
  s = ParseManifest(bare, "m.json").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("must hold its own checksum (manifest_xxh3_64)"));
  const size_t version = bare.find("\"version\": 3");
  bare.replace(version, std::strlen("\"version\": 3"), "\"version\": 2");
  EXPECT_TRUE(ParseManifest(bare, "m.json").ok()) << ParseManifest(bare, "m.json").status();
}

}  // namespace
}  // namespace dtrain::parallel
