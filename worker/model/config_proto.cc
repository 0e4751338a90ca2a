#include "worker/model/config_proto.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace dtrain::model {

absl::StatusOr<GptConfig> GptConfigFromProto(const dtrain::ModelConfig& proto) {
  GptConfig c;
  c.vocab_size = proto.vocab_size();
  c.context = proto.context();
  c.n_layer = proto.n_layer();
  c.n_head = proto.n_head();
  c.n_embd = proto.n_embd();
  RETURN_IF_ERROR(Validate(c));
  return c;
}

dtrain::ModelConfig GptConfigToProto(const GptConfig& config) {
  dtrain::ModelConfig proto;
  proto.set_vocab_size(config.vocab_size);
  proto.set_context(config.context);
  proto.set_n_layer(config.n_layer);
  proto.set_n_head(config.n_head);
  proto.set_n_embd(config.n_embd);
  return proto;
}

absl::StatusOr<GptConfig> GptConfigFromJson(absl::string_view json) {
  dtrain::ModelConfig proto;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &proto, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config JSON: ", std::string(status.message())));
  }
  return GptConfigFromProto(proto);
}

}  // namespace dtrain::model
