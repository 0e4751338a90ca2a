// GPT-2 initialization of a stage's parameters, identical for every parallel layout.
#ifndef DTRAIN_WORKER_MODEL_INIT_H_
#define DTRAIN_WORKER_MODEL_INIT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/gpt_stage.h"

namespace dtrain::model {

// normal(0, 0.02) for wte, wpe and matmul weights, normal(0, 0.02/sqrt(2L)) for the residual
// projections, zeros for biases, ones/zeros for LayerNorm. Each tensor draws from its own
// generator seeded by (seed, tensor name) and is generated whole, then sharded: a layer gets
// the same numbers whichever stage or tp rank holds it, so every layout starts identically.
absl::Status InitializeGpt2(GptStage& stage, uint64_t seed);

// The whole tensor `t` as InitializeGpt2 makes it (exposed for tests).
std::vector<float> InitialValues(const ParameterTensor& t, uint64_t seed);

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_INIT_H_
