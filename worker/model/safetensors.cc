#include "worker/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "worker/model/header_json.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O assumes a little-endian host");

namespace dtrain {
namespace model {
namespace {

// Hugging Face's reference implementation refuses headers above 100 MB; so do we.
constexpr int64_t kMaxHeaderBytes = 100'000'000;

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Product of `shape`, or -1 if a dimension is negative or the product overflows int64.
int64_t CheckedNumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

bool ParseDType(absl::string_view s, DType* out) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    if (s == DTypeName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

template <typename... Args>
absl::Status Invalid(const std::string& path, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", args...));
}

// Validates one tensor entry of the header, {"dtype": .., "shape": [..], "data_offsets": [b, e]},
// against a data section of `data_size` bytes.
absl::StatusOr<TensorInfo> ParseTensorEntry(const std::string& path, const std::string& name,
                                            const JsonValue& entry, int64_t data_size) {
  const std::string where = absl::StrCat("tensor ", name, ": ");
  if (entry.kind() != JsonValue::Kind::kObject)
    return Invalid(path, where, "entry is not a JSON object");
  for (const std::string& key : entry.keys()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Invalid(path, where, "unexpected field \"", key, "\"");
    }
  }
  TensorInfo info;
  info.name = name;

  const JsonValue* dtype = entry.Find("dtype");
  if (dtype == nullptr) return Invalid(path, where, "missing \"dtype\"");
  if (dtype->kind() != JsonValue::Kind::kString)
    return Invalid(path, where, "\"dtype\" is not a string");
  if (!ParseDType(dtype->text(), &info.dtype)) {
    // The safetensors format's other dtypes: a valid file that dtrain cannot read, said so.
    static constexpr absl::string_view kOtherFormatDTypes[] = {
        "F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL", "F8_E4M3", "F8_E5M2"};
    for (absl::string_view other : kOtherFormatDTypes) {
      if (dtype->text() == other) {
        return Invalid(path, where, "dtype ", other,
                       " is not supported: dtrain reads F32, BF16 and F16 tensors (convert the "
                       "file, e.g. with torch: tensor.float())");
      }
    }
    return Invalid(path, where, "unknown dtype \"", dtype->text(), "\" (accepted: F32, BF16, F16)");
  }

  const JsonValue* shape = entry.Find("shape");
  if (shape == nullptr) return Invalid(path, where, "missing \"shape\"");
  if (shape->kind() != JsonValue::Kind::kArray)
    return Invalid(path, where, "\"shape\" is not an array");
  for (const JsonValue& dim : shape->items()) {
    std::optional<int64_t> d = dim.AsInt64();
    if (!d) return Invalid(path, where, "\"shape\" must be an array of int64 integers");
    info.shape.push_back(*d);
  }
  for (int64_t d : info.shape) {
    if (d < 0)
      return Invalid(path, where, "negative dimension ", d, " in shape ", ShapeString(info.shape));
  }
  int64_t num_elements = CheckedNumElements(info.shape);
  if (num_elements < 0)
    return Invalid(path, where, "shape ", ShapeString(info.shape), " overflows int64");

  const JsonValue* offsets = entry.Find("data_offsets");
  if (offsets == nullptr) return Invalid(path, where, "missing \"data_offsets\"");
  std::optional<int64_t> begin, end;
  if (offsets->kind() == JsonValue::Kind::kArray && offsets->items().size() == 2) {
    begin = offsets->items()[0].AsInt64();
    end = offsets->items()[1].AsInt64();
  }
  if (!begin || !end)
    return Invalid(path, where, "\"data_offsets\" is not an array of two integers");
  info.begin = *begin;
  info.end = *end;
  const std::string range = absl::StrCat("data_offsets [", info.begin, ", ", info.end, "]");
  if (info.begin < 0 || info.begin > info.end)
    return Invalid(path, where, range, " need 0 <= begin <= end");
  if (info.end > data_size) {
    return Invalid(path, where, range, " exceed the data section of ", data_size,
                   " bytes (truncated file?)");
  }
  int64_t want_bytes;
  if (__builtin_mul_overflow(num_elements, DTypeSize(info.dtype), &want_bytes) ||
      want_bytes != info.end - info.begin) {
    return Invalid(path, where, range, " span ", info.end - info.begin, " bytes, but shape ",
                   ShapeString(info.shape), " of ", DTypeName(info.dtype), " needs ", num_elements,
                   " * ", DTypeSize(info.dtype), " bytes");
  }
  return info;
}

}  // namespace

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
  }
  return "?";
}

int64_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return Parse(std::move(bytes), path);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::string bytes, const std::string& path) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  return ParseHeader(std::move(bytes), size, path);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::ParseHeader(std::string bytes, int64_t size,
                                                             const std::string& path) {
  if (size < 8) {
    return Invalid(path, "file is ", size, " bytes, too short for the 8-byte header length");
  }
  // A head read in pieces may be shorter than the file says (found by fuzz/safetensors_fuzzer).
  if (bytes.size() < 8) {
    return Invalid(path, "only ", bytes.size(),
                   " bytes of the file were read, fewer than the "
                   "8-byte header length");
  }
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > static_cast<uint64_t>(size - 8)) {
    return Invalid(path, "header length ", header_len, " is larger than the ", size - 8,
                   " bytes after the length field (truncated file?)");
  }
  if (header_len > static_cast<uint64_t>(kMaxHeaderBytes)) {
    return Invalid(path, "header length ", header_len, " exceeds the limit of ", kMaxHeaderBytes,
                   " bytes");
  }
  if (header_len > bytes.size() - 8) {
    return Invalid(path, "header length ", header_len, " but only ", bytes.size() - 8,
                   " bytes of it were read");
  }
  absl::StatusOr<JsonValue> header = ParseJson(absl::string_view(bytes).substr(8, header_len));
  if (!header.ok()) return Invalid(path, "header is not valid JSON: ", header.status().message());
  if (header->kind() != JsonValue::Kind::kObject)
    return Invalid(path, "header is not a JSON object");

  SafetensorsFile file;
  file.path_ = path;
  file.data_start_ = 8 + static_cast<int64_t>(header_len);
  const int64_t data_size = size - file.data_start_;
  for (size_t i = 0; i < header->keys().size(); ++i) {
    const std::string& key = header->keys()[i];
    const JsonValue& value = header->items()[i];
    if (key == "__metadata__") {
      if (value.kind() != JsonValue::Kind::kObject)
        return Invalid(path, "__metadata__ is not a JSON object");
      for (size_t j = 0; j < value.keys().size(); ++j) {
        if (value.items()[j].kind() != JsonValue::Kind::kString) {
          return Invalid(path, "__metadata__ value of \"", value.keys()[j], "\" is not a string");
        }
        file.metadata_[value.keys()[j]] = value.items()[j].text();
      }
      continue;
    }
    ASSIGN_OR_RETURN(TensorInfo info, ParseTensorEntry(path, key, value, data_size));
    file.tensors_.emplace(key, std::move(info));
  }

  // No two tensors may share a byte (empty tensors occupy none). Gaps between tensors are allowed.
  std::vector<const TensorInfo*> by_begin;
  for (const auto& [name, info] : file.tensors_) {
    if (info.end > info.begin) by_begin.push_back(&info);
  }
  std::sort(by_begin.begin(), by_begin.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const TensorInfo& prev = *by_begin[i - 1];
    const TensorInfo& cur = *by_begin[i];
    if (cur.begin < prev.end) {
      return Invalid(path, "tensors ", prev.name, " [", prev.begin, ", ", prev.end, ") and ",
                     cur.name, " [", cur.begin, ", ", cur.end, ") overlap");
    }
  }
  file.has_data_ = static_cast<int64_t>(bytes.size()) == size;
  file.bytes_ = std::make_shared<const std::string>(std::move(bytes));
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& entry : tensors_) names.push_back(entry.first);
  return names;
}

const TensorInfo* SafetensorsFile::Find(absl::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::Status SafetensorsFile::ReadFloat32(absl::string_view name,
                                          absl::Span<const int64_t> expected_shape,
                                          absl::Span<float> out) const {
  const TensorInfo* info = Find(name);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat(path_, ": no tensor named ", name));
  if (!has_data_) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": only the header was read"));
  }
  return DecodeFloat32(
      name, expected_shape,
      absl::string_view(*bytes_).substr(data_start_ + info->begin, info->end - info->begin), out);
}

absl::Status SafetensorsFile::DecodeFloat32(absl::string_view name,
                                            absl::Span<const int64_t> expected_shape,
                                            absl::string_view raw, absl::Span<float> out) const {
  const TensorInfo* info = Find(name);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat(path_, ": no tensor named ", name));
  if (!std::equal(info->shape.begin(), info->shape.end(), expected_shape.begin(),
                  expected_shape.end())) {
    return Invalid(path_, "tensor ", name, " has shape ", ShapeString(info->shape), ", expected ",
                   ShapeString(expected_shape));
  }
  const int64_t n = info->num_elements();
  if (static_cast<int64_t>(out.size()) != n) {
    return Invalid(path_, "tensor ", name, " has ", n, " elements, but the output holds ",
                   out.size());
  }
  if (static_cast<int64_t>(raw.size()) != info->end - info->begin) {
    return Invalid(path_, "tensor ", name, ": ", raw.size(), " bytes given for its ",
                   info->end - info->begin);
  }
  const char* src = raw.data();
  switch (info->dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(out.data(), src, n * sizeof(float));
      break;
    case DType::kBF16:
    case DType::kF16: {
      const bool bf16 = info->dtype == DType::kBF16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        out[i] = bf16 ? Bf16ToFloat(bits) : F16ToFloat(bits);
      }
      break;
    }
  }
  return absl::OkStatus();
}

namespace {

// The header (validated, padded) of a file of `tensors` stored as `dtype`; `path` for errors.
absl::StatusOr<std::string> Header(const std::string& path, absl::Span<const TensorToWrite> tensors,
                                   const std::map<std::string, std::string>& metadata,
                                   DType dtype) {
  const int64_t elem_size = DTypeSize(dtype);
  std::map<std::string, std::string> entries;  // key -> JSON value; std::map sorts the keys
  int64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return Invalid(path, "cannot write a tensor named \"", t.name, "\"");
    }
    int64_t n = CheckedNumElements(t.shape);
    if (n < 0) return Invalid(path, "tensor ", t.name, ": bad shape ", ShapeString(t.shape));
    if (n != static_cast<int64_t>(t.data.size())) {
      return Invalid(path, "tensor ", t.name, ": shape ", ShapeString(t.shape), " has ", n,
                     " elements, but the data holds ", t.data.size());
    }
    std::string entry =
        absl::StrCat("{\"data_offsets\":[", offset, ",", offset + n * elem_size, "],\"dtype\":\"",
                     DTypeName(dtype), "\",\"shape\":[", absl::StrJoin(t.shape, ","), "]}");
    if (!entries.emplace(t.name, std::move(entry)).second) {
      return Invalid(path, "tensor ", t.name, " appears twice");
    }
    offset += n * elem_size;
  }
  if (!metadata.empty()) {
    std::string meta = "{";
    for (const auto& [key, value] : metadata) {
      if (meta.size() > 1) meta += ",";
      AppendJsonString(key, &meta);
      meta += ":";
      AppendJsonString(value, &meta);
    }
    entries["__metadata__"] = meta + "}";
  }
  std::string header = "{";
  for (const auto& [key, value] : entries) {
    if (header.size() > 1) header += ",";
    AppendJsonString(key, &header);
    absl::StrAppend(&header, ":", value);
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // 8 + header.size() is a multiple of 8
  if (static_cast<int64_t>(header.size()) > kMaxHeaderBytes) {
    return Invalid(path, "header of ", header.size(), " bytes exceeds the limit of ",
                   kMaxHeaderBytes);
  }
  return header;
}

// Appends the whole file (length, header, data) by append(string_view) -> Status.
template <typename Append>
absl::Status AppendFile(const std::string& header, absl::Span<const TensorToWrite> tensors,
                        DType dtype, Append append) {
  const uint64_t header_len = header.size();
  RETURN_IF_ERROR(append(absl::string_view(reinterpret_cast<const char*>(&header_len), 8)));
  RETURN_IF_ERROR(append(header));
  std::vector<uint16_t> chunk;
  for (const TensorToWrite& t : tensors) {
    if (dtype == DType::kF32) {
      RETURN_IF_ERROR(append(absl::string_view(reinterpret_cast<const char*>(t.data.data()),
                                               t.data.size() * sizeof(float))));
      continue;
    }
    constexpr size_t kChunk = 1 << 16;
    for (size_t i = 0; i < t.data.size(); i += kChunk) {
      chunk.resize(std::min(kChunk, t.data.size() - i));
      for (size_t j = 0; j < chunk.size(); ++j) {
        chunk[j] = dtype == DType::kBF16 ? FloatToBf16(t.data[i + j]) : FloatToF16(t.data[i + j]);
      }
      RETURN_IF_ERROR(
          append(absl::string_view(reinterpret_cast<const char*>(chunk.data()), chunk.size() * 2)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, absl::Span<const TensorToWrite> tensors,
                              const std::map<std::string, std::string>& metadata, DType dtype) {
  // Validate everything and build the header before touching the file system.
  ASSIGN_OR_RETURN(const std::string header, Header(path, tensors, metadata, dtype));
  ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Create(path));
  RETURN_IF_ERROR(AppendFile(header, tensors, dtype,
                             [&](absl::string_view bytes) { return writer.Append(bytes); }));
  return writer.Commit();
}

absl::StatusOr<std::string> SafetensorsBytes(const std::string& name,
                                             absl::Span<const TensorToWrite> tensors,
                                             const std::map<std::string, std::string>& metadata,
                                             CopyTensorData copy) {
  ASSIGN_OR_RETURN(const std::string header, Header(name, tensors, metadata, DType::kF32));
  int64_t size = 8 + header.size();
  for (const TensorToWrite& t : tensors) size += t.data.size() * sizeof(float);
  std::string bytes(size, '\0');
  char* out = bytes.data();
  // The file's head (its length and header) as WriteSafetensors writes it, then the data.
  RETURN_IF_ERROR(AppendFile(header, {}, DType::kF32, [&](absl::string_view part) {
    std::memcpy(out, part.data(), part.size());
    out += part.size();
    return absl::OkStatus();
  }));
  for (const TensorToWrite& t : tensors) {  // laid out in the given order (Header's offsets)
    const size_t n = t.data.size() * sizeof(float);
    if (n > 0) RETURN_IF_ERROR(copy(out, t.data.data(), n));
    out += n;
  }
  return bytes;
}

float Bf16ToFloat(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToBf16(float value) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1);  // round to nearest, ties to even; may carry into the exponent
  return static_cast<uint16_t>(u >> 16);
}

float F16ToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exp = (bits >> 10) & 0x1f;
  const uint32_t mant = bits & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in fp32.
    float magnitude = static_cast<float>(mant) * 0x1p-24f;
    std::memcpy(&u, &magnitude, 4);
    u |= sign;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);  // inf, or NaN keeping its payload
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToF16(float value) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00 | static_cast<uint16_t>((a >> 13) & 0x3ff);  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to inf (and inf stays inf)
  if (a < 0x38800000u) {
    // Below 2^-14: a half subnormal, mant * 2^-24. Scaling by 2^24 is exact; round half to even.
    float magnitude;
    std::memcpy(&magnitude, &a, 4);
    float scaled = magnitude * 0x1p24f;
    uint16_t m = static_cast<uint16_t>(scaled);
    float frac = scaled - m;
    if (frac > 0.5f || (frac == 0.5f && (m & 1))) ++m;  // m == 1024 is the smallest normal: right
    return sign | m;
  }
  // Normal: rebias the exponent (127 -> 15), then round the 23-bit mantissa to 10 bits.
  uint32_t r = a - ((127u - 15u) << 23);
  r += 0xfffu + ((r >> 13) & 1);
  return sign | static_cast<uint16_t>(r >> 13);
}

}  // namespace model
}  // namespace dtrain
