// Picking the next token from a model's logits: greedy, or a draw from the softmax at a
// temperature over the top k logits. Pure and deterministic for a seed on every platform (the
// draw is std::mt19937_64, whose sequence the C++ standard fixes, turned into [0,1) by its top
// 53 bits).
//
//   Sampler sampler({.temperature = 0.8, .top_k = 40, .seed = 1337});
//   int32_t next = sampler.Pick(logits);
#ifndef DTRAIN_WORKER_MODEL_SAMPLER_H_
#define DTRAIN_WORKER_MODEL_SAMPLER_H_

#include <cstdint>
#include <random>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace dtrain::model {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (the argmax, the lowest id among equal logits)
  int top_k = 0;             // draw among the k largest logits only; 0: all
  uint64_t seed = 1337;
};

// InvalidArgument naming the field: temperature < 0 or not finite, top_k < 0.
absl::Status Validate(const SamplingOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}

  // The next token's id for `logits` (V > 0 finite floats).
  int32_t Pick(absl::Span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_SAMPLER_H_
