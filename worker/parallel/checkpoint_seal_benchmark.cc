// Rank 0's time to seal a sharded checkpoint of the Quick start model
// (deploy/examples/quickstart-pp2-tp2.json: pp=2 x tp=2, vocab 256, context 128, 4 layers,
// width 128). Every rank's SaveShard runs first (not timed: each rank writes its own files in
// parallel in a real job); then WriteManifest, which reads every shard file back, checksums it,
// and writes manifest.json and `latest`, is timed over --repeats fresh steps. Numbers and the
// command are in docs/PERFORMANCE.md ("Sealing a checkpoint").
//
//   bazel run -c opt //worker/parallel:checkpoint_seal_benchmark -- --dir=/tmp/seal_bench
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "worker/model/init.h"
#include "worker/parallel/sharded_checkpoint.h"

ABSL_FLAG(std::string, dir, "/tmp/dtrain_seal_benchmark",
          "where each run writes its steps (in run-<pid>/)");
ABSL_FLAG(int, repeats, 20, "steps sealed; the median and the minimum are printed");

namespace dtrain::parallel {
namespace {

constexpr model::GptConfig kQuickstart{/*vocab_size=*/256, /*context=*/128, /*n_layer=*/4,
                                       /*n_head=*/4, /*n_embd=*/128};
constexpr int kPp = 2, kTp = 2;

struct Rank {
  ShardIdentity id;
  std::unique_ptr<model::GptStage> stage;
  std::unique_ptr<model::AdamW> opt;
};

absl::Status Run() {
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> be, kernels::CreateBackend("cpu", 1));
  // A fresh job directory per run: a sealed step is never rewritten.
  const std::string dir =
      AbsolutePath(absl::StrCat(absl::GetFlag(FLAGS_dir), "/run-", getpid()));
  RETURN_IF_ERROR(MakeDirectories(dir));
  std::vector<Rank> ranks;
  const int layers = kQuickstart.n_layer / kPp;
  for (int p = 0; p < kPp; ++p) {
    for (int t = 0; t < kTp; ++t) {
      Rank r;
      r.id = {0, p, t, 1, kPp, kTp, 1, false};
      const model::StageSpec spec{p * layers, layers, p == 0, p == kPp - 1};
      ASSIGN_OR_RETURN(r.stage, model::GptStage::Create(
                                    be.get(), kQuickstart, spec, {t, kTp},
                                    [](float*, int64_t) { return absl::OkStatus(); }));
      RETURN_IF_ERROR(model::InitializeGpt2(*r.stage, 1337));
      ASSIGN_OR_RETURN(model::AdamW opt,
                       model::AdamW::Create(be.get(), r.stage->layout(), {}));
      r.opt = std::make_unique<model::AdamW>(std::move(opt));
      ranks.push_back(std::move(r));
    }
  }
  const int repeats = absl::GetFlag(FLAGS_repeats);
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const int64_t step = i + 1;
    for (Rank& r : ranks) {
      model::GptStage* chunk = r.stage.get();
      model::AdamW* opt = r.opt.get();
      RETURN_IF_ERROR(SaveShard(dir, step, r.id, absl::MakeSpan(&chunk, 1),
                                absl::MakeSpan(&opt, 1)));
    }
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(WriteManifest(dir, step, ranks[0].id, kQuickstart));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  // The checksum alone, over the last step's files (the part of the seal that is CPU work).
  ASSIGN_OR_RETURN(const Manifest manifest, ReadManifest(dir));
  std::vector<std::string> files;
  int64_t bytes = 0;
  for (const ShardFile& f : manifest.files) {
    ASSIGN_OR_RETURN(std::string content,
                     ReadFileToString(absl::StrCat(dir, "/", StepDirName(manifest.step), "/",
                                                   f.FileName())));
    bytes += content.size();
    files.push_back(std::move(content));
  }
  std::vector<double> checksum_ms;
  uint64_t sink = 0;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& content : files) sink += ShardChecksum(content);
    checksum_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(ms.begin(), ms.end());
  std::sort(checksum_ms.begin(), checksum_ms.end());
  std::printf("seal (rank 0's WriteManifest) of the Quick start model, pp=%d tp=%d, %d files, "
              "%.1f MiB, %d steps: median %.2f ms, min %.2f ms; checksum alone: median %.2f ms "
              "(%.2f GiB/s) [%016llx]\n",
              kPp, kTp, static_cast<int>(files.size()), bytes / 1048576.0, repeats,
              ms[ms.size() / 2], ms.front(), checksum_ms[checksum_ms.size() / 2],
              bytes / 1073741824.0 / (checksum_ms[checksum_ms.size() / 2] / 1000.0),
              static_cast<unsigned long long>(sink));
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
