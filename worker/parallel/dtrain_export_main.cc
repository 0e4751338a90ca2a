// dtrain-export: one GPT-2 safetensors file from a sharded (multi-worker) checkpoint.
//
//   dtrain-export CHECKPOINT_DIR_OR_STEP_DIR OUT.safetensors
//
// CHECKPOINT_DIR (a job's directory, <checkpoint.dir>/<job id>) uses the step its `latest`
// names; a step directory must be complete (hold a manifest.json). Prints the step exported. The
// output is what a one-worker run saves: Hugging Face GPT-2 names, matrices (in, out), F32,
// metadata {"step": N}. Exit status: 0 done, 1 error, 2 usage.
#include <cstdio>
#include <cstring>
#include <string>

#include "common/version.h"
#include "worker/parallel/checkpoint_export.h"

namespace {

constexpr char kUsage[] =
    "usage: dtrain-export CHECKPOINT_DIR_OR_STEP_DIR OUT.safetensors\n"
    "  Writes the whole model of a sharded checkpoint as one GPT-2 safetensors file.\n"
    "  CHECKPOINT_DIR: a job's checkpoint directory (CHECKPOINT.DIR/job-000003), the step\n"
    "  its `latest` names; or a step directory (.../job-000003/step_00000042) holding a\n"
    "  manifest.json.\n"
    "dtrain-export --version: the version and the commit it was built from.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("%s\n", dtrain::VersionText("dtrain-export").c_str());
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-' || argv[i][0] == '\0') {
      std::fprintf(stderr, "dtrain-export: error: bad argument \"%s\" (no flags are accepted)\n%s",
                   argv[i], kUsage);
      return 2;
    }
  }
  if (argc != 3) {
    std::fprintf(stderr, "dtrain-export: error: expected 2 arguments, got %d\n%s", argc - 1,
                 kUsage);
    return 2;
  }
  const std::string in = argv[1], out = argv[2];
  absl::StatusOr<dtrain::model::CheckpointStep> exported =
      dtrain::parallel::ExportSafetensors(in, out);
  if (!exported.ok()) {
    std::fprintf(stderr, "dtrain-export: error: %s\n", exported.status().ToString().c_str());
    return 1;
  }
  std::printf("dtrain-export: %s\n", dtrain::parallel::ExportSummary(*exported, out).c_str());
  return 0;
}
