// GptConfig: the shape of a GPT-2 model, and its validation.
#ifndef DTRAIN_WORKER_MODEL_CONFIG_H_
#define DTRAIN_WORKER_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace dtrain::model {

struct GptConfig {
  int vocab_size = 256;  // V
  int context = 128;     // maximum sequence length: rows of wpe
  int n_layer = 4;       // L
  int n_head = 4;        // NH
  int n_embd = 256;      // C

  // Parameters of the whole model (tied head counted once).
  int64_t num_parameters() const;
  std::string DebugString() const;
};

// Checks every field and reports every problem at once, naming the fields:
// "n_head=3 does not divide n_embd=256; vocab_size=0 must be positive".
absl::Status Validate(const GptConfig& config);

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_CONFIG_H_
