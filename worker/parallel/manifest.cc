#include "worker/parallel/manifest.h"

#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "proto/checkpoint.pb.h"
#include "worker/model/checkpoint_dir.h"
#include "worker/model/config_proto.h"
#include "worker/model/held_directory.h"

namespace dtrain::parallel {
namespace {

constexpr char kShardFormat[] = "dtrain-shard-v2";
constexpr char kSelfChecksumKey[] = "\"manifest_xxh3_64\"";
constexpr char kSelfChecksumPlaceholder[] = "0000000000000000";

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

const char* KindName(ShardFileKind kind) {
  return kind == ShardFileKind::kModel ? "model" : "optimizer";
}

std::string Hex(uint64_t checksum) { return absl::StrFormat("%016x", checksum); }

dtrain::TensorShard ShardToProto(const TensorShard& t) {
  dtrain::TensorShard p;
  p.set_tensor(t.tensor);
  for (int64_t d : t.global_shape) p.add_global_shape(d);
  for (const model::TensorBox& box : t.boxes) {
    dtrain::TensorBox& b = *p.add_boxes();
    for (int64_t d : box.offset) b.add_offset(d);
    for (int64_t d : box.size) b.add_size(d);
  }
  p.set_flat_begin(t.flat_begin);
  p.set_flat_end(t.flat_end);
  return p;
}

TensorShard ShardFromProto(const dtrain::TensorShard& p) {
  TensorShard t;
  t.tensor = p.tensor();
  t.global_shape.assign(p.global_shape().begin(), p.global_shape().end());
  for (const dtrain::TensorBox& b : p.boxes()) {
    t.boxes.push_back({{b.offset().begin(), b.offset().end()}, {b.size().begin(), b.size().end()}});
  }
  t.flat_begin = p.flat_begin();
  t.flat_end = p.flat_end();
  return t;
}

}  // namespace

ShardFileEntry ToEntry(const ShardFile& f, ChecksumKind checksum) {
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
  if (f.kind == ShardFileKind::kOptimizer) e.set_adam_step(f.adam_step);
  for (const TensorShard& t : f.tensors) *e.add_tensors() = ShardToProto(t);
  e.set_bytes(f.bytes);
  if (checksum == ChecksumKind::kXxh3_64) {
    e.set_xxh3_64(Hex(f.checksum));
  } else {
    e.set_fnv1a64(Hex(f.checksum));
  }
  return e;
}

absl::StatusOr<ShardFile> FromEntry(const ShardFileEntry& e, ChecksumKind checksum,
                                    const std::string& where) {
  // Before anything else: a name is only ever opened inside its step directory.
  if (!model::IsPlainFileName(e.name())) {
    return Corrupt(where, absl::StrCat("entry name \"", model::QuoteBytes(e.name()),
                                       "\" is not a plain file name (refused unopened)"));
  }
  ShardFile f;
  if (e.kind() != "model" && e.kind() != "optimizer") {
    return Corrupt(where, absl::StrCat("unknown kind \"", e.kind(), "\""));
  }
  f.kind = e.kind() == "model" ? ShardFileKind::kModel : ShardFileKind::kOptimizer;
  f.dp_rank = e.dp_rank();
  f.pp_rank = e.pp_rank();
  f.tp_rank = e.tp_rank();
  f.chunk = e.chunk();
  f.stage = {e.first_layer(), e.num_layers(), e.has_embedding(), e.has_head()};
  if (f.kind == ShardFileKind::kOptimizer) {
    if (!e.has_adam_step()) return Corrupt(where, "an optimizer entry needs adam_step");
    f.adam_step = e.adam_step();
  }
  for (const dtrain::TensorShard& t : e.tensors()) f.tensors.push_back(ShardFromProto(t));
  f.bytes = e.bytes();
  const bool xxh3 = checksum == ChecksumKind::kXxh3_64;
  const std::string& hex = xxh3 ? e.xxh3_64() : e.fnv1a64();
  if (hex.size() != 16 || !absl::SimpleHexAtoi(hex, &f.checksum)) {
    return Corrupt(
        where, absl::StrCat("\"", ChecksumName(checksum), "\" is missing or not 16 hex digits"));
  }
  if (e.name() != f.FileName()) {
    return Corrupt(where,
                   absl::StrCat("entry \"", e.name(), "\" has the coordinates of ", f.FileName()));
  }
  return f;
}

std::vector<int64_t> StoredShape(const TensorShard& t) {
  if (t.boxes.empty()) return {t.size()};
  std::vector<int64_t> local = t.boxes[0].size;
  if (local.empty()) return {t.size()};
  local.back() = 0;
  for (const model::TensorBox& box : t.boxes) local.back() += box.size.back();
  int64_t n = 1;
  for (int64_t d : local) n *= d;
  if (t.flat_begin == 0 && t.flat_end == n) return local;
  return {t.size()};
}

absl::StatusOr<std::vector<ShardRun>> ShardRuns(const TensorShard& t, const std::string& where) {
  const std::string what = absl::StrCat(where, ": ", t.tensor);
  const size_t rank = t.global_shape.size();
  if (rank == 0 || t.boxes.empty()) return Corrupt(what, "no shape or no boxes");
  // A GPT-2 tensor is far below 2^40 elements; the bound keeps the arithmetic below exact.
  constexpr int64_t kMaxElements = int64_t{1} << 40;
  int64_t elements = 1;
  for (int64_t d : t.global_shape) {
    if (d < 1 || d > kMaxElements / elements) {
      return Corrupt(what, "global shape has a dim below 1 or more than 2^40 elements");
    }
    elements *= d;
  }
  // Row-major strides of the global tensor.
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * t.global_shape[d];
  const std::vector<int64_t>& lead = t.boxes[0].size;
  int64_t width = 0;  // of a local row: the boxes side by side
  for (const model::TensorBox& box : t.boxes) {
    if (box.offset.size() != rank || box.size.size() != rank) {
      return Corrupt(what, "a box has the wrong number of dims");
    }
    for (size_t d = 0; d < rank; ++d) {
      if (box.offset[d] < 0 || box.size[d] < 0 || box.offset[d] > t.global_shape[d] ||
          box.size[d] > t.global_shape[d] - box.offset[d] ||
          (d + 1 < rank && box.size[d] != lead[d])) {
        return Corrupt(what, "a box is outside the tensor or its leading sizes differ");
      }
    }
    width += box.size[rank - 1];
    if (width > t.global_shape[rank - 1]) {
      return Corrupt(what, "its boxes are wider together than the tensor");
    }
  }
  // The local tensor, row by row (a row: one index of every dim but the last): each box's
  // piece of that row in turn. Runs that continue each other are merged.
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= lead[d];
  const int64_t local_size = rows * width;
  if (t.flat_begin < 0 || t.flat_begin > t.flat_end || t.flat_end > local_size) {
    return Corrupt(what, absl::StrCat("flat range [", t.flat_begin, ", ", t.flat_end,
                                      ") is not within its ", local_size, " elements"));
  }
  std::vector<ShardRun> runs;
  if (t.flat_begin == t.flat_end) return runs;
  // Only the rows the flat range touches.
  const int64_t first_row = t.flat_begin / width, end_row = (t.flat_end - 1) / width + 1;
  std::vector<int64_t> index(rank, 0);  // the leading indices of row first_row
  for (int64_t r = first_row, d = static_cast<int64_t>(rank) - 2; d >= 0; --d) {
    index[d] = r % lead[d];
    r /= lead[d];
  }
  for (int64_t r = first_row; r < end_row; ++r) {
    int64_t local = r * width;  // index in the local tensor
    for (const model::TensorBox& box : t.boxes) {
      int64_t global = box.offset[rank - 1];
      for (size_t d = 0; d + 1 < rank; ++d) global += (box.offset[d] + index[d]) * stride[d];
      // The part of [local, local + box width) inside [flat_begin, flat_end).
      const int64_t lo = std::max(local, t.flat_begin);
      const int64_t hi = std::min(local + box.size[rank - 1], t.flat_end);
      if (lo < hi) {
        const ShardRun run{global + lo - local, lo - t.flat_begin, hi - lo};
        if (!runs.empty() && runs.back().global + runs.back().size == run.global &&
            runs.back().stored + runs.back().size == run.stored) {
          runs.back().size += run.size;
        } else {
          runs.push_back(run);
        }
      }
      local += box.size[rank - 1];
    }
    for (size_t d = rank - 1; d-- > 0;) {  // next row index, last leading dim fastest
      if (++index[d] < lead[d]) break;
      index[d] = 0;
    }
  }
  std::sort(runs.begin(), runs.end(),
            [](const ShardRun& a, const ShardRun& b) { return a.global < b.global; });
  return runs;
}

int64_t CopyOverlap(absl::Span<const ShardRun> from, absl::Span<const float> from_values,
                    absl::Span<const ShardRun> to, absl::Span<float> to_values) {
  int64_t copied = 0;
  size_t i = 0, j = 0;
  while (i < from.size() && j < to.size()) {
    const ShardRun& a = from[i];
    const ShardRun& b = to[j];
    const int64_t lo = std::max(a.global, b.global);
    const int64_t hi = std::min(a.global + a.size, b.global + b.size);
    if (lo < hi) {
      std::memcpy(to_values.data() + b.stored + (lo - b.global),
                  from_values.data() + a.stored + (lo - a.global), (hi - lo) * sizeof(float));
      copied += hi - lo;
    }
    // Advance whichever run ends first.
    if (a.global + a.size <= b.global + b.size) {
      ++i;
    } else {
      ++j;
    }
  }
  return copied;
}

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
    if (f.kind == kind && f.dp_rank == dp_rank && f.pp_rank == pp_rank && f.tp_rank == tp_rank &&
        f.chunk == chunk) {
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
  dtrain::DataPosition& d = *proto.mutable_data();
  d.set_consumed_sequences(m.data.consumed_sequences);
  d.set_batch_size(m.data.batch_size);
  d.set_seq_len(m.data.seq_len);
  for (const ShardFile& f : m.files) *proto.add_files() = ToEntry(f, m.checksum);
  proto.set_manifest_xxh3_64(kSelfChecksumPlaceholder);  // replaced by the checksum below
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;  // zero1: false, dp_rank: 0 are written too
  options.preserve_proto_field_names = true;     // the keys are the proto's field names
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(proto, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("manifest of step ", m.step, " as JSON: ", std::string(status.message())));
  }
  // The checksum of the bytes as written, with the placeholder, put in the placeholder's place.
  const size_t key = json.find(kSelfChecksumKey);
  const size_t at = key == std::string::npos ? key : json.find(kSelfChecksumPlaceholder, key);
  if (at == std::string::npos) {
    return absl::InternalError(
        absl::StrCat("manifest of step ", m.step, " has no ", kSelfChecksumKey, " to fill in"));
  }
  const std::string hex = Hex(ShardChecksum(json));
  json.replace(at, hex.size(), hex);
  return json;
}

absl::Status VerifyManifestChecksum(absl::string_view json, int version, const std::string& path) {
  const size_t key = json.find(kSelfChecksumKey);
  if (key == absl::string_view::npos) {
    if (version < 3) return absl::OkStatus();
    return Corrupt(path, absl::StrCat("a version ", version, " manifest must hold its own ",
                                      "checksum (manifest_xxh3_64) and this one has none"));
  }
  if (json.find(kSelfChecksumKey, key + 1) != absl::string_view::npos) {
    return Corrupt(path, "manifest_xxh3_64 appears twice");
  }
  // The value: the first 16 characters after the key's colon and opening quote.
  size_t at = key + std::strlen(kSelfChecksumKey);
  while (at < json.size() && (json[at] == ' ' || json[at] == ':' || json[at] == '\n')) ++at;
  uint64_t recorded = 0;
  if (at + 17 > json.size() || json[at] != '"' ||
      !absl::SimpleHexAtoi(json.substr(at + 1, 16), &recorded) || json[at + 17] != '"') {
    return Corrupt(path, "manifest_xxh3_64 is not 16 hex digits");
  }
  std::string zeroed(json);
  zeroed.replace(at + 1, 16, kSelfChecksumPlaceholder);
  const uint64_t actual = ShardChecksum(zeroed);
  if (actual == recorded) return absl::OkStatus();
  return Corrupt(path,
                 absl::StrCat("its bytes have xxh3_64 ", Hex(actual), ", not the ", Hex(recorded),
                              " it records (manifest_xxh3_64): the manifest was "
                              "altered or damaged after it was sealed"));
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view json, const std::string& path) {
  CheckpointManifest proto;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &proto);
  if (!status.ok()) {
    return Corrupt(path, absl::StrCat("not a manifest: ", std::string(status.message())));
  }
  if (proto.format() == kManifestFormat && proto.version() == 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        path,
        " is a checkpoint of format version 1, whose shards "
        "fit only the layout that wrote them (dp=",
        proto.layout().dp(), " pp=", proto.layout().pp(), " tp=", proto.layout().tp(),
        " virtual_stages=", proto.layout().virtual_stages(), proto.layout().zero1() ? " zero1" : "",
        "); this dtrain reads version ", kManifestVersion, " and ", kOldestReadableVersion,
        ". Resume it with the dtrain version "
        "that wrote it and the same layout, or export it with that version (dtrain export) and "
        "start from the exported file as init_checkpoint"));
  }
  if (proto.format() != kManifestFormat || proto.version() < kOldestReadableVersion ||
      proto.version() > kManifestVersion) {
    return Corrupt(path,
                   absl::StrCat("format \"", model::QuoteBytes(proto.format()), "\" version ",
                                proto.version(), ", expected \"", kManifestFormat, "\" version ",
                                kOldestReadableVersion, " to ", kManifestVersion));
  }
  RETURN_IF_ERROR(VerifyManifestChecksum(json, proto.version(), path));
  Manifest m;
  if (proto.checksum() == ChecksumName(ChecksumKind::kXxh3_64)) {
    m.checksum = ChecksumKind::kXxh3_64;
  } else if (proto.checksum() == ChecksumName(ChecksumKind::kFnv1a64)) {
    m.checksum = ChecksumKind::kFnv1a64;
  } else {
    return Corrupt(path, absl::StrCat("unknown checksum \"", proto.checksum(),
                                      "\" (known: xxh3_64, fnv1a64)"));
  }
  if (!proto.has_model() || !proto.has_layout() || !proto.has_data()) {
    return Corrupt(path, "\"model\", \"layout\" or \"data\" is missing");
  }
  m.step = proto.step();
  absl::StatusOr<model::GptConfig> config = model::GptConfigFromProto(proto.model());
  if (!config.ok()) return Corrupt(path, absl::StrCat("model: ", config.status().message()));
  m.config = *config;
  const CheckpointLayoutProto& l = proto.layout();
  m.layout = {l.dp(), l.pp(), l.tp(), l.virtual_stages(), l.zero1()};
  m.data = {proto.data().consumed_sequences(), proto.data().batch_size(), proto.data().seq_len()};
  for (const ShardFileEntry& e : proto.files()) {
    ASSIGN_OR_RETURN(ShardFile f, FromEntry(e, m.checksum,
                                            absl::StrCat(path, ": files[", m.files.size(), "] (",
                                                         model::QuoteBytes(e.name()), ")")));
    m.files.push_back(std::move(f));
  }
  return m;
}

std::map<std::string, std::string> ShardMetadata(const ShardFile& f, int64_t step) {
  ShardFileEntry entry = ToEntry(f, ChecksumKind::kXxh3_64);
  entry.clear_bytes();  // a file cannot hold its own size and checksum
  entry.clear_xxh3_64();
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  // Cannot fail: a message of known fields.
  (void)google::protobuf::util::MessageToJsonString(entry, &json, options);
  return {{"format", kShardFormat}, {"step", absl::StrCat(step)}, {"entry", json}};
}

absl::StatusOr<ShardFile> ParseShardMetadata(const std::map<std::string, std::string>& meta,
                                             int64_t* step, const std::string& path) {
  auto get = [&](const char* key) -> absl::StatusOr<std::string> {
    auto it = meta.find(key);
    if (it == meta.end()) return Corrupt(path, absl::StrCat("metadata has no \"", key, "\""));
    return it->second;
  };
  ASSIGN_OR_RETURN(std::string format, get("format"));
  if (format != kShardFormat) {
    return Corrupt(path, absl::StrCat("format \"", format, "\" is not a ", kShardFormat, " shard"));
  }
  ASSIGN_OR_RETURN(std::string step_text, get("step"));
  if (!absl::SimpleAtoi(step_text, step) || *step < 0) {
    return Corrupt(path, absl::StrCat("metadata \"step\" is not a step: \"", step_text, "\""));
  }
  ASSIGN_OR_RETURN(std::string json, get("entry"));
  ShardFileEntry entry;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &entry);
  if (!parsed.ok()) {
    return Corrupt(path, absl::StrCat("metadata \"entry\": ", std::string(parsed.message())));
  }
  entry.set_xxh3_64(Hex(0));  // filled by whoever checksums the file
  return FromEntry(entry, ChecksumKind::kXxh3_64, path);
}

namespace {

// The checksum of bytes fed a piece at a time.
class StreamingChecksum {
 public:
  explicit StreamingChecksum(ChecksumKind kind) : kind_(kind) {
    if (kind_ == ChecksumKind::kXxh3_64) {
      state_ = XXH3_createState();
      XXH3_64bits_reset(state_);
    }
  }
  ~StreamingChecksum() {
    if (state_ != nullptr) XXH3_freeState(state_);
  }
  StreamingChecksum(const StreamingChecksum&) = delete;
  StreamingChecksum& operator=(const StreamingChecksum&) = delete;

  void Update(absl::string_view bytes) {
    if (kind_ == ChecksumKind::kXxh3_64) {
      XXH3_64bits_update(state_, bytes.data(), bytes.size());
      return;
    }
    for (unsigned char c : bytes) {
      fnv_ ^= c;
      fnv_ *= 0x100000001b3ull;
    }
  }
  uint64_t Digest() const {
    return kind_ == ChecksumKind::kXxh3_64 ? XXH3_64bits_digest(state_) : fnv_;
  }

 private:
  ChecksumKind kind_;
  XXH3_state_t* state_ = nullptr;
  uint64_t fnv_ = 0xcbf29ce484222325ull;
};

}  // namespace

absl::StatusOr<uint64_t> ChecksumOfFile(int fd, ChecksumKind kind) {
  StreamingChecksum checksum(kind);
  std::string piece(4 << 20, '\0');
  while (true) {
    const ssize_t n = read(fd, piece.data(), piece.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, "read");
    if (n == 0) return checksum.Digest();
    checksum.Update(absl::string_view(piece.data(), static_cast<size_t>(n)));
  }
}

absl::Status ReadVerifiedArrays(const std::string& step_dir, const ShardFile& entry,
                                ChecksumKind kind,
                                const std::function<bool(const std::string& name)>& wanted,
                                const TakeArray& take) {
  const std::string path = absl::StrCat(step_dir, "/", entry.FileName());
  absl::StatusOr<model::HeldDirectory> dir = model::OpenStepDirectory(step_dir);
  if (!dir.ok()) return absl::DataLossError(dir.status().message());
  // Never more than the manifest says: a planted 4 GB file is refused before it is read.
  int64_t file_size = 0;
  absl::StatusOr<int> fd = dir->OpenFile(entry.FileName(), entry.bytes, &file_size);
  if (!fd.ok()) {
    return absl::DataLossError(
        absl::StrCat(path, ": listed in the manifest but unreadable: ", fd.status().message()));
  }
  std::FILE* f = fdopen(*fd, "rb");
  if (f == nullptr) {
    close(*fd);
    return absl::DataLossError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, &std::fclose);
  struct stat st;
  st.st_size = file_size;
  if (file_size != entry.bytes) {
    return absl::DataLossError(absl::StrCat(path, ": ", file_size, " bytes, but the manifest says ",
                                            entry.bytes, " (truncated or rewritten)"));
  }
  StreamingChecksum checksum(kind);
  int64_t offset = 0;  // bytes read so far
  std::string piece;
  // Reads the next n bytes into `piece` and checksums them.
  auto read = [&](int64_t n) -> absl::Status {
    piece.resize(n);
    if (n > 0 && std::fread(piece.data(), 1, n, f) != static_cast<size_t>(n)) {
      return absl::DataLossError(
          absl::StrCat(path, ": read failed at byte ", offset, " (truncated while reading?)"));
    }
    checksum.Update(piece);
    offset += n;
    return absl::OkStatus();
  };
  auto mismatch = [&]() -> absl::Status {
    if (checksum.Digest() == entry.checksum) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat(path, ": ", ChecksumName(kind),
                                            " checksum mismatch with the manifest (the file is "
                                            "corrupted)"));
  };
  // The header: the length field, then the JSON.
  const int64_t size = st.st_size;
  uint64_t header_len = 0;
  if (size >= 8) {
    RETURN_IF_ERROR(read(8));
    std::memcpy(&header_len, piece.data(), 8);
  }
  std::string head = piece;
  if (size >= 8 && header_len <= static_cast<uint64_t>(size - 8)) {
    RETURN_IF_ERROR(read(static_cast<int64_t>(header_len)));
    head += piece;
  }
  absl::StatusOr<model::SafetensorsFile> file =
      model::SafetensorsFile::ParseHeader(std::move(head), size, path);
  // The arrays wanted, in file order; tensors never share a byte.
  std::vector<const model::TensorInfo*> arrays;
  if (file.ok()) {
    for (const std::string& name : file->names()) {
      if (wanted(name)) arrays.push_back(file->Find(name));
    }
    std::sort(
        arrays.begin(), arrays.end(),
        [](const model::TensorInfo* a, const model::TensorInfo* b) { return a->begin < b->begin; });
  }
  constexpr int64_t kPiece = 4 << 20;
  std::string array;  // the bytes of the array being read
  std::vector<float> values;
  size_t next = 0;  // arrays[next] is the next to complete
  while (offset < size) {
    const int64_t data_offset = offset - (file.ok() ? file->data_start() : 0);
    RETURN_IF_ERROR(read(std::min(kPiece, size - offset)));
    // Append the bytes of `piece` that belong to the arrays wanted; take each once complete.
    int64_t at = data_offset;  // data offset of piece[0]
    const int64_t end = data_offset + static_cast<int64_t>(piece.size());
    while (next < arrays.size() && at < end) {
      const model::TensorInfo& a = *arrays[next];
      const int64_t lo = std::max(at, a.begin), hi = std::min(end, a.end);
      if (lo < hi) array.append(piece, lo - data_offset, hi - lo);
      if (hi < a.end && a.end > a.begin) break;  // the rest of it is in the next piece
      values.resize(a.num_elements());
      RETURN_IF_ERROR(file->DecodeFloat32(a.name, a.shape, array, absl::MakeSpan(values)));
      RETURN_IF_ERROR(take(a, values));
      std::string().swap(array);
      at = std::max(at, a.end);
      ++next;
    }
  }
  RETURN_IF_ERROR(mismatch());
  if (!file.ok()) return absl::DataLossError(file.status().message());
  for (; next < arrays.size(); ++next) {  // empty arrays at the end
    values.clear();
    RETURN_IF_ERROR(
        file->DecodeFloat32(arrays[next]->name, arrays[next]->shape, "", absl::MakeSpan(values)));
    RETURN_IF_ERROR(take(*arrays[next], values));
  }
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
  ASSIGN_OR_RETURN(const model::HeldDirectory held, model::OpenStepDirectory(step_dir));
  absl::StatusOr<std::string> json = held.ReadFile(kManifestFileName, model::kMaxManifestBytes);
  if (absl::IsNotFound(json.status())) {
    if (held.KindOf(model::kOptimizerFileName) == model::HeldDirectory::Kind::kFile) {
      return absl::FailedPreconditionError(absl::StrCat(
          step_dir, " is a one-worker checkpoint of format version 1 (", model::kModelFileName,
          " sealed by ", model::kOptimizerFileName, ", no ", kManifestFileName,
          "), which this dtrain does not "
          "resume: resume it with the dtrain version that wrote it, or start from its weights "
          "with init_checkpoint=",
          step_dir, "/", model::kModelFileName, " (the optimizer state starts afresh)"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(step_dir, " is not a complete sharded checkpoint: it has no ",
                     kManifestFileName, " (its save did not finish)"));
  }
  if (!json.ok()) return absl::DataLossError(json.status().message());
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
    if (manifest.Find(want.kind, want.dp_rank, want.pp_rank, want.tp_rank, want.chunk) == nullptr) {
      return absl::DataLossError(absl::StrCat(manifest_path, ": no entry for ", want.FileName()));
    }
  }
  if (step_dir_out != nullptr) *step_dir_out = step_dir;
  return manifest;
}

}  // namespace dtrain::parallel
