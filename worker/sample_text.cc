#include "worker/sample_text.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
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

// A safetensors file to load and the model's config; `temp` is removed when it goes.
struct Weights {
  Weights() = default;
  Weights(const Weights&) = delete;
  Weights& operator=(const Weights&) = delete;
  ~Weights() {
    if (!temp.empty()) std::remove(temp.c_str());
  }
  model::GptConfig config;
  std::string path;
  std::string temp;
};

absl::Status ResolveWeights(const std::string& checkpoint, const SampleAsked& asked,
                            const SampleSetup& setup, Weights& w) {
  std::error_code error;
  if (!std::filesystem::exists(checkpoint, error)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint at ", checkpoint));
  }
  if (!std::filesystem::is_directory(checkpoint, error)) {
    ASSIGN_OR_RETURN(w.config, ConfigOfSafetensors(checkpoint, asked.n_head));
    if (setup.admit != nullptr) RETURN_IF_ERROR(setup.admit(w.config));
    w.path = checkpoint;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(parallel::Manifest manifest, parallel::ReadManifest(checkpoint));
  w.config = manifest.config;
  if (setup.admit != nullptr) RETURN_IF_ERROR(setup.admit(w.config));
  // Unique within the process too: a worker may draw while another sample's file exists.
  static std::atomic<int> counter{0};
  std::string dir = setup.temp_dir;
  if (dir.empty()) {
    const char* tmpdir = std::getenv("TMPDIR");
    dir = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  }
  w.temp =
      absl::StrCat(dir, "/dtrain-sample-", getpid(), "-", counter.fetch_add(1), ".safetensors");
  RETURN_IF_ERROR(parallel::ExportSafetensors(checkpoint, w.temp).status());
  w.path = w.temp;
  return absl::OkStatus();
}

absl::Status PastDeadline(const SampleSetup& setup, size_t drawn) {
  if (setup.give_up != nullptr && setup.give_up()) {
    return absl::CancelledError(absl::StrCat("the sample was stopped after ", drawn,
                                             " new tokens: the worker is stopping"));
  }
  if (absl::Now() < setup.deadline) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("the sample ran out of time after ", drawn, " new tokens"));
}

}  // namespace

absl::StatusOr<SampleText> DrawSample(const std::string& checkpoint, const SampleAsked& asked,
                                      const SampleSetup& setup) {
  const model::SamplingOptions options{
      .temperature = asked.temperature, .top_k = asked.top_k, .seed = asked.seed};
  RETURN_IF_ERROR(model::Validate(options));
  if (asked.tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tokens=", asked.tokens, ": at least 1"));
  }
  Weights weights;
  RETURN_IF_ERROR(ResolveWeights(checkpoint, asked, setup, weights));
  const model::GptConfig& config = weights.config;

  // The tokenizer the vocabulary implies.
  std::unique_ptr<tokenizer::Gpt2Bpe> bpe;
  SampleText out;
  if (config.vocab_size >= 50257) {
    ASSIGN_OR_RETURN(tokenizer::Gpt2Bpe loaded, tokenizer::Gpt2Bpe::Load(setup.tokenizer_dir));
    bpe = std::make_unique<tokenizer::Gpt2Bpe>(std::move(loaded));
    ASSIGN_OR_RETURN(out.prompt_tokens, bpe->Encode(asked.prompt));
    if (out.prompt_tokens.empty()) out.prompt_tokens.push_back(tokenizer::Gpt2Bpe::kEndOfText);
  } else if (config.vocab_size == 256) {
    out.prompt_tokens.assign(asked.prompt.begin(), asked.prompt.end());
    for (int32_t& t : out.prompt_tokens) t &= 0xFF;
    if (out.prompt_tokens.empty()) {
      return absl::InvalidArgumentError(
          "a byte-level model (vocab_size 256) has no start token: give it text to continue "
          "with --prompt=TEXT");
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size=", config.vocab_size, ": no tokenizer (256: bytes; 50257 or more: GPT-2's)"));
  }
  if (static_cast<int>(out.prompt_tokens.size()) > config.context) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt is ", out.prompt_tokens.size(),
                                                   " tokens, more than the model's context of ",
                                                   config.context));
  }

  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend,
                   kernels::CreateBackend(setup.device, setup.threads));
  ASSIGN_OR_RETURN(std::unique_ptr<model::GptStage> stage,
                   model::GptStage::Create(backend.get(), config, {0, config.n_layer}, {}));
  RETURN_IF_ERROR(model::LoadWeights(weights.path, *stage));
  ASSIGN_OR_RETURN(std::unique_ptr<model::GptDecoder> decoder,
                   model::GptDecoder::Create(stage.get()));

  model::Sampler sampler(options);
  std::vector<float> logits;
  for (int32_t t : out.prompt_tokens) {
    RETURN_IF_ERROR(PastDeadline(setup, 0));
    ASSIGN_OR_RETURN(logits, decoder->Next(t));
  }
  while (static_cast<int>(out.tokens.size()) < asked.tokens) {
    out.tokens.push_back(sampler.Pick(logits));
    if (decoder->position() >= config.context) break;
    if (static_cast<int>(out.tokens.size()) < asked.tokens) {
      RETURN_IF_ERROR(PastDeadline(setup, out.tokens.size()));
      ASSIGN_OR_RETURN(logits, decoder->Next(out.tokens.back()));
    }
  }

  std::vector<int32_t> all = out.prompt_tokens;
  all.insert(all.end(), out.tokens.begin(), out.tokens.end());
  if (bpe != nullptr) {
    ASSIGN_OR_RETURN(out.text, bpe->Decode(all));
  } else {
    for (int32_t t : all) out.text.push_back(static_cast<char>(t));
  }
  return out;
}

int64_t SampleMemoryBytes(const model::GptConfig& config) {
  const int64_t kv = int64_t{2} * config.n_layer * config.context * config.n_embd;
  return 4 * (2 * config.num_parameters() + kv + 2 * int64_t{config.vocab_size});
}

std::string SampleJson(const std::vector<int32_t>& prompt_tokens,
                       const std::vector<int32_t>& tokens, const std::string& text) {
  std::string line = absl::StrCat("{\"prompt_tokens\":[", absl::StrJoin(prompt_tokens, ","),
                                  "],\"tokens\":[", absl::StrJoin(tokens, ","), "],\"text\":");
  model::AppendJsonString(tokenizer::ReplaceInvalidUtf8(text), &line);
  line.push_back('}');
  return line;
}

}  // namespace dtrain
