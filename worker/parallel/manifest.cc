#include "worker/parallel/manifest.h"

#include <cmath>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/model/file_io.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace dtrain::parallel {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

constexpr char kModelFormat[] = "dtrain-shard-model-v1";
constexpr char kOptimizerFormat[] = "dtrain-shard-adamw-v1";

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

// Typed access to a JSON object parsed into google.protobuf.Struct. Struct keeps numbers as
// doubles, which is exact for the integers a manifest holds (sizes and offsets below 2^53);
// checksums are hex strings for that reason.
class Object {
 public:
  Object(const Struct& s, std::string path, std::string where)
      : s_(s), path_(std::move(path)), where_(std::move(where)) {}

  absl::StatusOr<const Value*> Get(absl::string_view key, Value::KindCase kind,
                                   absl::string_view type) const {
    auto it = s_.fields().find(std::string(key));
    if (it == s_.fields().end() || it->second.kind_case() != kind) {
      return Corrupt(path_, absl::StrCat(where_, "\"", key, "\" is missing or not ", type));
    }
    return &it->second;
  }
  absl::StatusOr<int64_t> Int(absl::string_view key) const {
    ASSIGN_OR_RETURN(const Value* v, Get(key, Value::kNumberValue, "an integer"));
    const double d = v->number_value();
    if (d != std::floor(d) || std::fabs(d) > 9007199254740992.0) {
      return Corrupt(path_, absl::StrCat(where_, "\"", key, "\" is not an integer"));
    }
    return static_cast<int64_t>(d);
  }
  absl::StatusOr<bool> Bool(absl::string_view key) const {
    ASSIGN_OR_RETURN(const Value* v, Get(key, Value::kBoolValue, "a boolean"));
    return v->bool_value();
  }
  absl::StatusOr<std::string> String(absl::string_view key) const {
    ASSIGN_OR_RETURN(const Value* v, Get(key, Value::kStringValue, "a string"));
    return v->string_value();
  }
  absl::StatusOr<Object> Child(absl::string_view key) const {
    ASSIGN_OR_RETURN(const Value* v, Get(key, Value::kStructValue, "an object"));
    return Object(v->struct_value(), path_, absl::StrCat(where_, key, ": "));
  }

 private:
  const Struct& s_;
  std::string path_;
  std::string where_;
};

absl::StatusOr<Struct> ParseJsonObject(absl::string_view json, const std::string& path) {
  Struct s;
  auto status = google::protobuf::util::JsonStringToMessage(std::string(json), &s);
  if (!status.ok()) {
    return Corrupt(path, absl::StrCat("not a JSON object: ", std::string(status.message())));
  }
  return s;
}

const char* KindName(ShardFileKind kind) {
  return kind == ShardFileKind::kModel ? "model" : "optimizer";
}

absl::StatusOr<ShardFile> ParseFileEntry(const Object& o, const std::string& path) {
  ShardFile f;
  ASSIGN_OR_RETURN(std::string name, o.String("name"));
  ASSIGN_OR_RETURN(std::string kind, o.String("kind"));
  if (kind != "model" && kind != "optimizer") {
    return Corrupt(path, absl::StrCat(name, ": unknown kind \"", kind, "\""));
  }
  f.kind = kind == "model" ? ShardFileKind::kModel : ShardFileKind::kOptimizer;
  ASSIGN_OR_RETURN(f.dp_rank, o.Int("dp_rank"));
  ASSIGN_OR_RETURN(f.pp_rank, o.Int("pp_rank"));
  ASSIGN_OR_RETURN(f.tp_rank, o.Int("tp_rank"));
  ASSIGN_OR_RETURN(f.chunk, o.Int("chunk"));
  ASSIGN_OR_RETURN(f.stage.first_layer, o.Int("first_layer"));
  ASSIGN_OR_RETURN(f.stage.num_layers, o.Int("num_layers"));
  ASSIGN_OR_RETURN(f.stage.has_embedding, o.Bool("has_embedding"));
  ASSIGN_OR_RETURN(f.stage.has_head, o.Bool("has_head"));
  if (f.kind == ShardFileKind::kOptimizer) {
    ASSIGN_OR_RETURN(f.range_begin, o.Int("range_begin"));
    ASSIGN_OR_RETURN(f.range_end, o.Int("range_end"));
    ASSIGN_OR_RETURN(f.buffer_size, o.Int("buffer_size"));
    ASSIGN_OR_RETURN(f.adam_step, o.Int("adam_step"));
  }
  ASSIGN_OR_RETURN(f.bytes, o.Int("bytes"));
  ASSIGN_OR_RETURN(std::string hash, o.String("fnv1a64"));
  if (hash.size() != 16 || !absl::SimpleHexAtoi(hash, &f.fnv1a64)) {
    return Corrupt(path, absl::StrCat(name, ": \"fnv1a64\" is not 16 hex digits"));
  }
  if (name != f.FileName()) {
    return Corrupt(path,
                   absl::StrCat("entry \"", name, "\" has the coordinates of ", f.FileName()));
  }
  return f;
}

}  // namespace

std::string ShardFile::FileName() const {
  if (kind == ShardFileKind::kModel) {
    return absl::StrFormat("model-pp%d-tp%d-c%d.safetensors", pp_rank, tp_rank, chunk);
  }
  return absl::StrFormat("optimizer-dp%d-pp%d-tp%d-c%d.safetensors", dp_rank, pp_rank, tp_rank,
                         chunk);
}

const ShardFile* Manifest::Find(ShardFileKind kind, int dp_rank, int pp_rank, int tp_rank,
                                int chunk) const {
  for (const ShardFile& f : files) {
    if (f.kind == kind && f.dp_rank == dp_rank && f.pp_rank == pp_rank &&
        f.tp_rank == tp_rank && f.chunk == chunk) {
      return &f;
    }
  }
  return nullptr;
}


uint64_t Fnv1a64(absl::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string ManifestToJson(const Manifest& m) {
  const model::GptConfig& c = m.config;
  const CheckpointLayout& l = m.layout;
  std::string out = absl::StrCat(
      "{\n  \"format\": \"", kManifestFormat, "\",\n  \"version\": ", kManifestVersion,
      ",\n  \"step\": ", m.step, ",\n  \"checksum\": \"fnv1a64\",\n",
      "  \"model\": {\"vocab_size\": ", c.vocab_size, ", \"context\": ", c.context,
      ", \"n_layer\": ", c.n_layer, ", \"n_head\": ", c.n_head, ", \"n_embd\": ", c.n_embd,
      "},\n  \"layout\": {\"dp\": ", l.dp, ", \"pp\": ", l.pp, ", \"tp\": ", l.tp,
      ", \"virtual_stages\": ", l.virtual_stages, ", \"zero1\": ", l.zero1 ? "true" : "false",
      "},\n  \"files\": [");
  for (size_t i = 0; i < m.files.size(); ++i) {
    const ShardFile& f = m.files[i];
    absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "    {\"name\": \"", f.FileName(),
                    "\", \"kind\": \"", KindName(f.kind), "\", \"dp_rank\": ", f.dp_rank,
                    ", \"pp_rank\": ", f.pp_rank, ", \"tp_rank\": ", f.tp_rank,
                    ", \"chunk\": ", f.chunk, ", \"first_layer\": ", f.stage.first_layer,
                    ", \"num_layers\": ", f.stage.num_layers,
                    ", \"has_embedding\": ", f.stage.has_embedding ? "true" : "false",
                    ", \"has_head\": ", f.stage.has_head ? "true" : "false");
    if (f.kind == ShardFileKind::kOptimizer) {
      absl::StrAppend(&out, ", \"range_begin\": ", f.range_begin, ", \"range_end\": ",
                      f.range_end, ", \"buffer_size\": ", f.buffer_size,
                      ", \"adam_step\": ", f.adam_step);
    }
    absl::StrAppend(&out, ", \"bytes\": ", f.bytes, ", \"fnv1a64\": \"",
                    absl::StrFormat("%016x", f.fnv1a64), "\"}");
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view json, const std::string& path) {
  ASSIGN_OR_RETURN(Struct root, ParseJsonObject(json, path));
  Object o(root, path, "");
  ASSIGN_OR_RETURN(std::string format, o.String("format"));
  ASSIGN_OR_RETURN(int64_t version, o.Int("version"));
  if (format != kManifestFormat || version != kManifestVersion) {
    return Corrupt(path, absl::StrCat("format \"", format, "\" version ", version, ", expected \"",
                                      kManifestFormat, "\" version ", kManifestVersion));
  }
  ASSIGN_OR_RETURN(std::string checksum, o.String("checksum"));
  if (checksum != "fnv1a64") return Corrupt(path, absl::StrCat("unknown checksum ", checksum));
  Manifest m;
  ASSIGN_OR_RETURN(m.step, o.Int("step"));
  ASSIGN_OR_RETURN(Object model, o.Child("model"));
  ASSIGN_OR_RETURN(m.config.vocab_size, model.Int("vocab_size"));
  ASSIGN_OR_RETURN(m.config.context, model.Int("context"));
  ASSIGN_OR_RETURN(m.config.n_layer, model.Int("n_layer"));
  ASSIGN_OR_RETURN(m.config.n_head, model.Int("n_head"));
  ASSIGN_OR_RETURN(m.config.n_embd, model.Int("n_embd"));
  ASSIGN_OR_RETURN(Object layout, o.Child("layout"));
  ASSIGN_OR_RETURN(m.layout.dp, layout.Int("dp"));
  ASSIGN_OR_RETURN(m.layout.pp, layout.Int("pp"));
  ASSIGN_OR_RETURN(m.layout.tp, layout.Int("tp"));
  ASSIGN_OR_RETURN(m.layout.virtual_stages, layout.Int("virtual_stages"));
  ASSIGN_OR_RETURN(m.layout.zero1, layout.Bool("zero1"));
  ASSIGN_OR_RETURN(const Value* files, o.Get("files", Value::kListValue, "a list"));
  for (const Value& entry : files->list_value().values()) {
    if (entry.kind_case() != Value::kStructValue) {
      return Corrupt(path, "an entry of \"files\" is not an object");
    }
    Object e(entry.struct_value(), path, absl::StrCat("files[", m.files.size(), "]: "));
    ASSIGN_OR_RETURN(ShardFile f, ParseFileEntry(e, path));
    m.files.push_back(std::move(f));
  }
  return m;
}

std::map<std::string, std::string> ShardMetadata(const ShardFile& f, int64_t step) {
  const bool opt = f.kind == ShardFileKind::kOptimizer;
  std::map<std::string, std::string> meta = {
      {"format", opt ? kOptimizerFormat : kModelFormat},
      {"step", absl::StrCat(step)},
      {"dp_rank", absl::StrCat(f.dp_rank)},
      {"pp_rank", absl::StrCat(f.pp_rank)},
      {"tp_rank", absl::StrCat(f.tp_rank)},
      {"chunk", absl::StrCat(f.chunk)},
      {"first_layer", absl::StrCat(f.stage.first_layer)},
      {"num_layers", absl::StrCat(f.stage.num_layers)},
      {"has_embedding", f.stage.has_embedding ? "true" : "false"},
      {"has_head", f.stage.has_head ? "true" : "false"},
  };
  if (opt) {
    meta["range_begin"] = absl::StrCat(f.range_begin);
    meta["range_end"] = absl::StrCat(f.range_end);
    meta["buffer_size"] = absl::StrCat(f.buffer_size);
    meta["adam_step"] = absl::StrCat(f.adam_step);
  }
  return meta;
}

absl::StatusOr<ShardFile> ParseShardMetadata(const std::map<std::string, std::string>& meta,
                                             int64_t* step, const std::string& path) {
  auto get = [&](const char* key) -> absl::StatusOr<std::string> {
    auto it = meta.find(key);
    if (it == meta.end()) return Corrupt(path, absl::StrCat("metadata has no \"", key, "\""));
    return it->second;
  };
  auto get_int = [&](const char* key, auto* out) -> absl::Status {
    ASSIGN_OR_RETURN(std::string s, get(key));
    if (!absl::SimpleAtoi(s, out) || *out < 0) {
      return Corrupt(path, absl::StrCat("metadata \"", key, "\" is not a count: \"", s, "\""));
    }
    return absl::OkStatus();
  };
  auto get_bool = [&](const char* key, bool* out) -> absl::Status {
    ASSIGN_OR_RETURN(std::string s, get(key));
    if (s != "true" && s != "false") {
      return Corrupt(path, absl::StrCat("metadata \"", key, "\" is not true/false"));
    }
    *out = s == "true";
    return absl::OkStatus();
  };
  ShardFile f;
  ASSIGN_OR_RETURN(std::string format, get("format"));
  if (format != kModelFormat && format != kOptimizerFormat) {
    return Corrupt(path, absl::StrCat("format \"", format, "\" is not a dtrain shard"));
  }
  f.kind = format == kModelFormat ? ShardFileKind::kModel : ShardFileKind::kOptimizer;
  RETURN_IF_ERROR(get_int("step", step));
  RETURN_IF_ERROR(get_int("dp_rank", &f.dp_rank));
  RETURN_IF_ERROR(get_int("pp_rank", &f.pp_rank));
  RETURN_IF_ERROR(get_int("tp_rank", &f.tp_rank));
  RETURN_IF_ERROR(get_int("chunk", &f.chunk));
  RETURN_IF_ERROR(get_int("first_layer", &f.stage.first_layer));
  RETURN_IF_ERROR(get_int("num_layers", &f.stage.num_layers));
  RETURN_IF_ERROR(get_bool("has_embedding", &f.stage.has_embedding));
  RETURN_IF_ERROR(get_bool("has_head", &f.stage.has_head));
  if (f.kind == ShardFileKind::kOptimizer) {
    RETURN_IF_ERROR(get_int("range_begin", &f.range_begin));
    RETURN_IF_ERROR(get_int("range_end", &f.range_end));
    RETURN_IF_ERROR(get_int("buffer_size", &f.buffer_size));
    RETURN_IF_ERROR(get_int("adam_step", &f.adam_step));
  }
  return f;
}

absl::StatusOr<std::map<std::string, std::string>> ReadSafetensorsMetadata(
    absl::string_view bytes, const std::string& path) {
  uint64_t header_len = 0;
  if (bytes.size() < 8) return Corrupt(path, "too short for a safetensors header");
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8) return Corrupt(path, "safetensors header is truncated");
  ASSIGN_OR_RETURN(Struct header, ParseJsonObject(bytes.substr(8, header_len), path));
  std::map<std::string, std::string> meta;
  auto it = header.fields().find("__metadata__");
  if (it == header.fields().end()) return meta;
  if (it->second.kind_case() != Value::kStructValue) {
    return Corrupt(path, "__metadata__ is not an object");
  }
  for (const auto& [key, value] : it->second.struct_value().fields()) {
    if (value.kind_case() != Value::kStringValue) {
      return Corrupt(path, absl::StrCat("__metadata__ value of \"", key, "\" is not a string"));
    }
    meta[key] = value.string_value();
  }
  return meta;
}

absl::StatusOr<model::SafetensorsFile> OpenVerified(const std::string& step_dir,
                                                    const ShardFile& entry) {
  const std::string path = absl::StrCat(step_dir, "/", entry.FileName());
  {
    absl::StatusOr<std::string> bytes = model::ReadFileToString(path);
    if (!bytes.ok()) {
      return absl::DataLossError(absl::StrCat(path, ": listed in the manifest but unreadable: ",
                                              bytes.status().message()));
    }
    if (static_cast<int64_t>(bytes->size()) != entry.bytes) {
      return absl::DataLossError(absl::StrCat(path, ": ", bytes->size(),
                                              " bytes, but the manifest says ", entry.bytes,
                                              " (truncated or rewritten)"));
    }
    if (Fnv1a64(*bytes) != entry.fnv1a64) {
      return absl::DataLossError(
          absl::StrCat(path, ": checksum mismatch with the manifest (the file is corrupted)"));
    }
  }  // The bytes are freed before the file is parsed (one copy in memory at a time).
  absl::StatusOr<model::SafetensorsFile> file = model::SafetensorsFile::Open(path);
  if (!file.ok()) return absl::DataLossError(file.status().message());
  return file;
}

absl::Status ReadShardTensor(const model::SafetensorsFile& file, const std::string& name,
                             const std::vector<int64_t>& shape, absl::Span<float> out) {
  absl::Status s = file.ReadFloat32(name, shape, out);
  if (!s.ok()) return absl::DataLossError(s.message());
  return absl::OkStatus();
}

}  // namespace dtrain::parallel
