// Conversions between the wire/spec form of a model config (proto/model.proto) and GptConfig.
#ifndef DTRAIN_WORKER_MODEL_CONFIG_PROTO_H_
#define DTRAIN_WORKER_MODEL_CONFIG_PROTO_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/model.pb.h"
#include "worker/model/config.h"

namespace dtrain::model {

// Validated GptConfig from its proto; errors list every bad field.
absl::StatusOr<GptConfig> GptConfigFromProto(const dtrain::ModelConfig& proto);
dtrain::ModelConfig GptConfigToProto(const GptConfig& config);

// Parses a ModelConfig from JSON (protobuf's JSON mapping; unknown fields are an error naming
// the field) and validates it.
absl::StatusOr<GptConfig> GptConfigFromJson(absl::string_view json);

}  // namespace dtrain::model

#endif  // DTRAIN_WORKER_MODEL_CONFIG_PROTO_H_
