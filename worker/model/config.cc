#include "worker/model/config.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrain::model {

int64_t GptConfig::num_parameters() const {
  const int64_t C = n_embd;
  const int64_t per_layer = 2 * C                // ln_1
                            + C * 3 * C + 3 * C  // attn.c_attn
                            + C * C + C          // attn.c_proj
                            + 2 * C              // ln_2
                            + C * 4 * C + 4 * C  // mlp.c_fc
                            + 4 * C * C + C;     // mlp.c_proj
  return int64_t{vocab_size} * C + int64_t{context} * C + n_layer * per_layer + 2 * C;
}

std::string GptConfig::DebugString() const {
  return absl::StrCat("vocab_size=", vocab_size, " context=", context, " n_layer=", n_layer,
                      " n_head=", n_head, " n_embd=", n_embd);
}

absl::Status Validate(const GptConfig& config) {
  std::vector<std::string> problems;
  auto positive = [&](const char* name, int value) {
    if (value <= 0) problems.push_back(absl::StrCat(name, "=", value, " must be positive"));
  };
  positive("vocab_size", config.vocab_size);
  positive("context", config.context);
  positive("n_layer", config.n_layer);
  positive("n_head", config.n_head);
  positive("n_embd", config.n_embd);
  if (config.n_head > 0 && config.n_embd > 0 && config.n_embd % config.n_head != 0) {
    problems.push_back(
        absl::StrCat("n_head=", config.n_head, " does not divide n_embd=", config.n_embd));
  }
  // Token ids are int32 on the device and uint16 in llm.c files; wte rows are indexed in int.
  if (config.vocab_size > (1 << 24)) {
    problems.push_back(absl::StrCat("vocab_size=", config.vocab_size, " exceeds 16777216"));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid model config: ", absl::StrJoin(problems, "; ")));
}

}  // namespace dtrain::model
