#include "worker/parallel/manifest.h"

#include <sys/stat.h>
#include <xxhash.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "proto/checkpoint.pb.h"
#include "worker/model/checkpoint_dir.h"
#include "worker/model/config_proto.h"

namespace dtrain::parallel {
namespace {

constexpr char kModelFormat[] = "dtrain-shard-model-v1";
constexpr char kOptimizerFormat[] = "dtrain-shard-adamw-v1";

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

const char* KindName(ShardFileKind kind) {
  return kind == ShardFileKind::kModel ? "model" : "optimizer";
}

ShardFileEntry ToProto(const ShardFile& f, ChecksumKind checksum) {
  ShardFileEntry e;
  e.set_name(f.FileName());
  e.set_kind(KindName(f.kind));
  e.set_dp_rank(f.dp_rank);
  e.set_pp_rank(f.pp_rank);
  e.set_tp_rank(f.tp_rank);
  e.set_chunk(f.chunk);
  e.set_first_layer(f.stage.first_layer);
  e.set_num_layers(f.stage.num_layers);
  e.set_has_embedding(f.stage.has_embedding);
  e.set_has_head(f.stage.has_head);
  if (f.kind == ShardFileKind::kOptimizer) {
    e.set_range_begin(f.range_begin);
    e.set_range_end(f.range_end);
    e.set_buffer_size(f.buffer_size);
    e.set_adam_step(f.adam_step);
  }
  e.set_bytes(f.bytes);
  const std::string hex = absl::StrFormat("%016x", f.checksum);
  if (checksum == ChecksumKind::kXxh3_64) {
    e.set_xxh3_64(hex);
  } else {
    e.set_fnv1a64(hex);
  }
  return e;
}

absl::StatusOr<ShardFile> FromProto(const ShardFileEntry& e, ChecksumKind checksum,
                                    const std::string& path, size_t index) {
  const std::string where = absl::StrCat("files[", index, "] (", e.name(), "): ");
  ShardFile f;
  if (e.kind() != "model" && e.kind() != "optimizer") {
    return Corrupt(path, absl::StrCat(where, "unknown kind \"", e.kind(), "\""));
  }
  f.kind = e.kind() == "model" ? ShardFileKind::kModel : ShardFileKind::kOptimizer;
  f.dp_rank = e.dp_rank();
  f.pp_rank = e.pp_rank();
  f.tp_rank = e.tp_rank();
  f.chunk = e.chunk();
  f.stage = {e.first_layer(), e.num_layers(), e.has_embedding(), e.has_head()};
  if (f.kind == ShardFileKind::kOptimizer) {
    if (!e.has_range_begin() || !e.has_range_end() || !e.has_buffer_size() ||
        !e.has_adam_step()) {
      return Corrupt(path, absl::StrCat(where, "an optimizer entry needs range_begin, "
                                               "range_end, buffer_size and adam_step"));
    }
    f.range_begin = e.range_begin();
    f.range_end = e.range_end();
    f.buffer_size = e.buffer_size();
    f.adam_step = e.adam_step();
  }
  f.bytes = e.bytes();
  const bool xxh3 = checksum == ChecksumKind::kXxh3_64;
  const std::string& hex = xxh3 ? e.xxh3_64() : e.fnv1a64();
  if (hex.size() != 16 || !absl::SimpleHexAtoi(hex, &f.checksum)) {
    return Corrupt(path, absl::StrCat(where, "\"", ChecksumName(checksum),
                                      "\" is missing or not 16 hex digits"));
  }
  if (e.name() != f.FileName()) {
    return Corrupt(path, absl::StrCat("entry \"", e.name(), "\" has the coordinates of ",
                                      f.FileName()));
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


absl::string_view ChecksumName(ChecksumKind kind) {
  return kind == ChecksumKind::kXxh3_64 ? "xxh3_64" : "fnv1a64";
}

uint64_t ShardChecksum(absl::string_view bytes, ChecksumKind kind) {
  if (kind == ChecksumKind::kXxh3_64) return XXH3_64bits(bytes.data(), bytes.size());
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

absl::StatusOr<std::string> ManifestToJson(const Manifest& m) {
  CheckpointManifest proto;
  proto.set_format(kManifestFormat);
  proto.set_version(kManifestVersion);
  proto.set_step(m.step);
  proto.set_checksum(std::string(ChecksumName(m.checksum)));
  *proto.mutable_model() = model::GptConfigToProto(m.config);
  CheckpointLayoutProto& l = *proto.mutable_layout();
  l.set_dp(m.layout.dp);
  l.set_pp(m.layout.pp);
  l.set_tp(m.layout.tp);
  l.set_virtual_stages(m.layout.virtual_stages);
  l.set_zero1(m.layout.zero1);
  for (const ShardFile& f : m.files) *proto.add_files() = ToProto(f, m.checksum);
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;  // zero1: false, dp_rank: 0 are written too
  options.preserve_proto_field_names = true;     // the keys are the proto's field names
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(proto, &json, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("manifest of step ", m.step, " as JSON: ",
                                            std::string(status.message())));
  }
  return json;
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view json, const std::string& path) {
  CheckpointManifest proto;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &proto);
  if (!status.ok()) {
    return Corrupt(path, absl::StrCat("not a manifest: ", std::string(status.message())));
  }
  if (proto.format() != kManifestFormat || proto.version() != kManifestVersion) {
    return Corrupt(path, absl::StrCat("format \"", proto.format(), "\" version ",
                                      proto.version(), ", expected \"", kManifestFormat,
                                      "\" version ", kManifestVersion));
  }
  Manifest m;
  if (proto.checksum() == ChecksumName(ChecksumKind::kXxh3_64)) {
    m.checksum = ChecksumKind::kXxh3_64;
  } else if (proto.checksum() == ChecksumName(ChecksumKind::kFnv1a64)) {
    m.checksum = ChecksumKind::kFnv1a64;
  } else {
    return Corrupt(path, absl::StrCat("unknown checksum \"", proto.checksum(),
                                      "\" (known: xxh3_64, fnv1a64)"));
  }
  if (!proto.has_model() || !proto.has_layout()) {
    return Corrupt(path, "\"model\" or \"layout\" is missing");
  }
  m.step = proto.step();
  absl::StatusOr<model::GptConfig> config = model::GptConfigFromProto(proto.model());
  if (!config.ok()) return Corrupt(path, absl::StrCat("model: ", config.status().message()));
  m.config = *config;
  const CheckpointLayoutProto& l = proto.layout();
  m.layout = {l.dp(), l.pp(), l.tp(), l.virtual_stages(), l.zero1()};
  for (const ShardFileEntry& e : proto.files()) {
    ASSIGN_OR_RETURN(ShardFile f, FromProto(e, m.checksum, path, m.files.size()));
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

absl::StatusOr<model::SafetensorsFile> OpenVerified(const std::string& step_dir,
                                                    const ShardFile& entry, ChecksumKind kind) {
  const std::string path = absl::StrCat(step_dir, "/", entry.FileName());
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": listed in the manifest but unreadable: ",
                                            bytes.status().message()));
  }
  if (static_cast<int64_t>(bytes->size()) != entry.bytes) {
    return absl::DataLossError(absl::StrCat(path, ": ", bytes->size(),
                                            " bytes, but the manifest says ", entry.bytes,
                                            " (truncated or rewritten)"));
  }
  if (ShardChecksum(*bytes, kind) != entry.checksum) {
    return absl::DataLossError(absl::StrCat(path, ": ", ChecksumName(kind),
                                            " checksum mismatch with the manifest (the file is "
                                            "corrupted)"));
  }
  absl::StatusOr<model::SafetensorsFile> file =
      model::SafetensorsFile::Parse(std::move(bytes).value(), path);
  if (!file.ok()) return absl::DataLossError(file.status().message());
  return file;
}

absl::Status ReadShardTensor(const model::SafetensorsFile& file, const std::string& name,
                             const std::vector<int64_t>& shape, absl::Span<float> out) {
  absl::Status s = file.ReadFloat32(name, shape, out);
  if (!s.ok()) return absl::DataLossError(s.message());
  return absl::OkStatus();
}

// Every file a complete step of `layout` holds (coordinates only), in manifest order.
std::vector<ShardFile> ExpectedFiles(const CheckpointLayout& layout) {
  std::vector<ShardFile> files;
  for (int kind = 0; kind < 2; ++kind) {
    const int dps = kind == 1 && layout.zero1 ? layout.dp : 1;
    for (int d = 0; d < dps; ++d) {
      for (int p = 0; p < layout.pp; ++p) {
        for (int t = 0; t < layout.tp; ++t) {
          for (int j = 0; j < layout.virtual_stages; ++j) {
            ShardFile f;
            f.kind = kind == 0 ? ShardFileKind::kModel : ShardFileKind::kOptimizer;
            f.dp_rank = d;
            f.pp_rank = p;
            f.tp_rank = t;
            f.chunk = j;
            files.push_back(f);
          }
        }
      }
    }
  }
  return files;
}

absl::StatusOr<Manifest> ReadManifest(const std::string& path, std::string* step_dir_out) {
  ASSIGN_OR_RETURN(const model::CheckpointStep checkpoint, model::ResolveCheckpoint(path));
  const std::string& step_dir = checkpoint.step_dir;
  const std::string manifest_path = absl::StrCat(step_dir, "/", kManifestFileName);
  absl::StatusOr<std::string> json = ReadFileToString(manifest_path);
  if (absl::IsNotFound(json.status())) {
    if (Exists(absl::StrCat(step_dir, "/", model::kModelFileName))) {
      return absl::FailedPreconditionError(absl::StrCat(
          step_dir, " is a one-worker checkpoint (model.safetensors, no ", kManifestFileName,
          "): its model.safetensors already is the whole model"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        step_dir, " is not a complete sharded checkpoint: it has no ", kManifestFileName,
        " (its save did not finish)"));
  }
  RETURN_IF_ERROR(json.status());
  ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(*json, manifest_path));
  if (manifest.step != checkpoint.step) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": holds step ", manifest.step,
                                            " but its directory is step ", checkpoint.step));
  }
  const CheckpointLayout& l = manifest.layout;
  if (l.dp < 1 || l.pp < 1 || l.tp < 1 || l.virtual_stages < 1) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": invalid layout"));
  }
  // Exactly the files the layout implies, each once.
  const std::vector<ShardFile> expected = ExpectedFiles(l);
  if (manifest.files.size() != expected.size()) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": lists ", manifest.files.size(),
                                            " files, the layout needs ", expected.size()));
  }
  for (const ShardFile& want : expected) {
    if (manifest.Find(want.kind, want.dp_rank, want.pp_rank, want.tp_rank, want.chunk) ==
        nullptr) {
      return absl::DataLossError(absl::StrCat(manifest_path, ": no entry for ", want.FileName()));
    }
  }
  if (step_dir_out != nullptr) *step_dir_out = step_dir;
  return manifest;
}

}  // namespace dtrain::parallel
