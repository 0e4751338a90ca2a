#include "worker/model/init.h"

#include <cmath>
#include <random>

#include "common/status_macros.h"

namespace dtrain::model {
namespace {

uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::vector<float> InitialValues(const ParameterTensor& t, uint64_t seed) {
  std::vector<float> values(t.global_size(), t.init_value);
  if (t.init_std <= 0.0f) return values;
  // mt19937_64's sequence is fixed by the standard; Box-Muller (not std::normal_distribution,
  // whose algorithm is implementation-defined) keeps the numbers identical across toolchains.
  std::mt19937_64 rng(seed ^ Fnv1a(t.name));
  constexpr double kTwoPi = 6.283185307179586;
  const double scale = 1.0 / 18446744073709551616.0;  // 2^-64
  for (size_t i = 0; i < values.size(); i += 2) {
    const double u1 = (static_cast<double>(rng()) + 1.0) * scale;  // (0, 1]
    const double u2 = static_cast<double>(rng()) * scale;
    const double r = std::sqrt(-2.0 * std::log(u1));
    values[i] = static_cast<float>(t.init_std * r * std::cos(kTwoPi * u2));
    if (i + 1 < values.size()) {
      values[i + 1] = static_cast<float>(t.init_std * r * std::sin(kTwoPi * u2));
    }
  }
  return values;
}

absl::Status InitializeGpt2(GptStage& stage, uint64_t seed) {
  std::vector<float> host(stage.layout().total_size());
  for (const ParameterTensor& t : stage.layout().tensors()) {
    std::vector<float> whole = InitialValues(t, seed);
    RETURN_IF_ERROR(
        ExtractShard(t, stage.tp(), whole, absl::MakeSpan(host.data() + t.offset, t.local_size())));
  }
  return stage.backend()->CopyToDevice(stage.params(), host.data(), host.size() * sizeof(float));
}

}  // namespace dtrain::model
