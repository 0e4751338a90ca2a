#include "worker/model/safetensors.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string TempPath(const std::string& name) { return ::testing::TempDir() + name; }

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

// A fresh empty directory under the test's temp dir.
std::string MakeDir(const std::string& name) {
  std::string dir = TempPath(name);
  mkdir(dir.c_str(), 0755);
  EXPECT_THAT(ListDir(dir), IsEmpty()) << dir;
  return dir;
}

// A safetensors file by hand: 8-byte little-endian header length, header, data.
std::string MakeFile(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::string U16Bytes(const std::vector<uint16_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 2);
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Expects `s` to have `code` and a message containing the path and each of `parts`.
void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& path,
                 const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  for (const std::string& part : parts) EXPECT_THAT(std::string(s.message()), HasSubstr(part));
}

TEST(Safetensors, Float32RoundTripKeepsNamesShapesOffsetsAndValues) {
  const std::string path = TempPath("roundtrip_f32.safetensors");
  const std::vector<float> a = {1.5f, -2.25f, 3e-40f /* subnormal */, 1e30f, 0.f, -0.f};
  const std::vector<float> b = {7, 8, 9, 10};
  const std::vector<float> c = {42};
  const std::vector<float> empty;
  ASSERT_TRUE(WriteSafetensors(
                  path, {{"z.a", {2, 3}, a}, {"b", {4}, b}, {"c", {}, c}, {"e", {0, 5}, empty}}, {})
                  .ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->path(), path);
  EXPECT_THAT(f->names(), ElementsAre("b", "c", "e", "z.a"));
  EXPECT_THAT(f->metadata(), IsEmpty());
  EXPECT_EQ(f->Find("nope"), nullptr);

  // Laid out in the given order, contiguously.
  const TensorInfo* info = f->Find("z.a");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->dtype, DType::kF32);
  EXPECT_THAT(info->shape, ElementsAre(2, 3));
  EXPECT_EQ(info->begin, 0);
  EXPECT_EQ(info->end, 24);
  EXPECT_EQ(info->num_elements(), 6);
  EXPECT_EQ(f->Find("b")->begin, 24);
  EXPECT_EQ(f->Find("c")->begin, 40);
  EXPECT_EQ(f->Find("c")->num_elements(), 1);
  EXPECT_EQ(f->Find("e")->begin, 44);
  EXPECT_EQ(f->Find("e")->end, 44);

  std::vector<float> out(6);
  ASSERT_TRUE(f->ReadFloat32("z.a", {2, 3}, absl::MakeSpan(out)).ok());
  EXPECT_EQ(std::memcmp(out.data(), a.data(), 24), 0);  // bit-exact, -0 included
  out.resize(4);
  ASSERT_TRUE(f->ReadFloat32("b", {4}, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, b);
  out.resize(1);
  ASSERT_TRUE(f->ReadFloat32("c", {}, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], 42.f);
  out.clear();
  EXPECT_TRUE(f->ReadFloat32("e", {0, 5}, absl::MakeSpan(out)).ok());

  // The data section starts 8-byte aligned.
  uint64_t header_len;
  std::memcpy(&header_len, ReadRaw(path).data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);
}

TEST(Safetensors, WriterProducesExactBytesWithSortedKeysAndSpacePadding) {
  const std::string path = TempPath("golden.safetensors");
  const std::vector<float> a = {2.0f, -0.5f}, b = {1.0f};
  ASSERT_TRUE(WriteSafetensors(path, {{"b", {1}, b}, {"a", {2}, a}}, {{"format", "pt"}}).ok());
  // 139 bytes of JSON + 5 spaces: 8 + 144 is a multiple of 8. "b" comes first in the data.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"data_offsets":[4,12],"dtype":"F32","shape":[2]},)"
      R"("b":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}})"
      "     ";
  ASSERT_EQ(header.size(), 144u);
  EXPECT_EQ(ReadRaw(path), MakeFile(header, FloatBytes({1.0f, 2.0f, -0.5f})));
}

TEST(Safetensors, InMemoryBytesAreTheWrittenFileWithEachTensorCopiedOnceInPlace) {
  const std::string path = TempPath("in_memory.safetensors");
  const std::vector<float> a = {2.0f, -0.5f}, b = {1.0f}, empty;
  const std::vector<TensorToWrite> tensors = {{"b", {1}, b}, {"a", {2}, a}, {"e", {0}, empty}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  std::vector<std::pair<const float*, size_t>> copies;  // what was read, from where
  absl::StatusOr<std::string> bytes = SafetensorsBytes("in_memory", tensors, {{"format", "pt"}},
                                                       [&](void* dst, const float* src, size_t n) {
                                                         copies.push_back({src, n});
                                                         std::memcpy(dst, src, n);
                                                         return absl::OkStatus();
                                                       });
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, ReadRaw(path));
  // One copy per non-empty tensor, from the tensor's own memory (a device's, in a snapshot).
  EXPECT_THAT(copies, ElementsAre(std::pair<const float*, size_t>{b.data(), 4},
                                  std::pair<const float*, size_t>{a.data(), 8}));

  // A failed copy (a device error) is the result, with no bytes.
  absl::StatusOr<std::string> failed = SafetensorsBytes(
      "in_memory", tensors, {},
      [](void*, const float*, size_t) { return absl::InternalError("device copy failed"); });
  EXPECT_EQ(failed.status(), absl::InternalError("device copy failed"));
  // The header is checked before anything is copied.
  const std::vector<float> three = {1, 2, 3};
  int calls = 0;
  absl::StatusOr<std::string> bad =
      SafetensorsBytes("in_memory", {{"x", {2}, three}}, {}, [&](void*, const float*, size_t) {
        ++calls;
        return absl::OkStatus();
      });
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("in_memory"));
  EXPECT_EQ(calls, 0);
}

TEST(Safetensors, Bf16WriteRoundsToNearestEven) {
  const std::string path = TempPath("roundtrip_bf16.safetensors");
  // Hand-computed: bf16 keeps the top 16 bits of the fp32; the low 16 decide the rounding.
  const std::vector<float> in = {
      1.0f,                  // 0x3f800000 -> 0x3f80 exact
      FromBits(0x3f808000),  // 1 + 2^-8, a tie between 0x3f80 and 0x3f81 -> even 0x3f80 = 1.0
      FromBits(0x3f818000),  // 1 + 3*2^-8, a tie between 0x3f81 and 0x3f82 -> even 0x3f82
      FromBits(0x3f808001),  // just above the tie -> 0x3f81 = 1 + 2^-7
      FromBits(0x3f807fff),  // just below the tie -> 0x3f80 = 1.0
      3.14159265f,           // 0x40490fdb -> 0x4049 = 3.140625
      -2.5f,                 // exact
      FromBits(0x7f7fffff),  // FLT_MAX rounds up to +inf (0x7f80)
  };
  const std::vector<float> expected = {1.0f, 1.0f,      1.015625f, 1.0078125f,
                                       1.0f, 3.140625f, -2.5f,     INFINITY};
  ASSERT_TRUE(WriteSafetensors(path, {{"w", {2, 4}, in}}, {}, DType::kBF16).ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Find("w")->dtype, DType::kBF16);
  EXPECT_EQ(f->Find("w")->end - f->Find("w")->begin, 16);
  std::vector<float> out(8);
  ASSERT_TRUE(f->ReadFloat32("w", {2, 4}, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, expected);

  EXPECT_EQ(FloatToBf16(FromBits(0x3f818000)), 0x3f82);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  EXPECT_TRUE(
      std::isnan(Bf16ToFloat(FloatToBf16(FromBits(0x7f800001)))));  // payload only in low bits
}

TEST(Safetensors, ReadsHandBuiltBf16AndF16Files) {
  const std::string path = TempPath("halves.safetensors");
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc049, 0x0001, 0xff80};
  const std::vector<uint16_t> f16 = {0x3c00, 0x0001, 0x03ff, 0x8400,
                                     0x7bff, 0x7c00, 0xfc00, 0x7e00};
  WriteRaw(path, MakeFile(R"({"h":{"dtype":"F16","shape":[8],"data_offsets":[8,24]},)"
                          R"("g":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})",
                          U16Bytes(bf16) + U16Bytes(f16)));
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> out(4);
  ASSERT_TRUE(f->ReadFloat32("g", {4}, absl::MakeSpan(out)).ok());
  EXPECT_THAT(out, ElementsAre(1.0f, -3.140625f, FromBits(0x00010000), -INFINITY));
  out.resize(8);
  ASSERT_TRUE(f->ReadFloat32("h", {8}, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], std::ldexp(1.0f, -24));         // smallest subnormal
  EXPECT_EQ(out[2], 1023 * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(out[3], -std::ldexp(1.0f, -14));        // smallest normal, negative
  EXPECT_EQ(out[4], 65504.0f);                      // largest finite
  EXPECT_EQ(out[5], INFINITY);
  EXPECT_EQ(out[6], -INFINITY);
  EXPECT_TRUE(std::isnan(out[7]));
}

TEST(Safetensors, F16ConversionIsExactForEveryHalfAndRoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = F16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(f)))) << h;
    } else {
      ASSERT_EQ(FloatToF16(f), h) << "half 0x" << std::hex << h << " -> " << f;
    }
  }
  const float tiny = std::ldexp(1.0f, -24);
  EXPECT_EQ(FloatToF16(0.5f * tiny), 0x0000);  // tie between 0 and 1 -> even 0
  EXPECT_EQ(FloatToF16(0.75f * tiny), 0x0001);
  EXPECT_EQ(FloatToF16(2.5f * tiny), 0x0002);     // tie -> even
  EXPECT_EQ(FloatToF16(1023.5f * tiny), 0x0400);  // tie rounds up into the smallest normal
  EXPECT_EQ(FloatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even mantissa 0
  EXPECT_EQ(FloatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even mantissa 2
  EXPECT_EQ(FloatToF16(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);  // tie between 65504 and 2^16 -> inf
  EXPECT_EQ(FloatToF16(-1e10f), 0xfc00);
  EXPECT_EQ(FloatToF16(1e-30f), 0x0000);
}

TEST(Safetensors, F16WriteRoundTrips) {
  const std::string path = TempPath("roundtrip_f16.safetensors");
  const std::vector<float> in = {1.0f, -0.333251953125f, 65504.0f, 6e-8f};
  ASSERT_TRUE(WriteSafetensors(path, {{"x", {4}, in}}, {}, DType::kF16).ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Find("x")->dtype, DType::kF16);
  std::vector<float> out(4);
  ASSERT_TRUE(f->ReadFloat32("x", {4}, absl::MakeSpan(out)).ok());
  EXPECT_THAT(out, ElementsAre(1.0f, -0.333251953125f, 65504.0f, std::ldexp(1.0f, -24)));
}

TEST(Safetensors, MetadataRoundTripsIncludingCharactersJsonMustEscape) {
  const std::string path = TempPath("metadata.safetensors");
  const std::map<std::string, std::string> metadata = {
      {"step", "1200"},
      {"config", R"({"n_layer": 12})"},
      {"odd\tkey", "line1\nline2\\ \x01 caf\xc3\xa9"}};
  const std::vector<float> x = {1};
  ASSERT_TRUE(WriteSafetensors(path, {{"x", {1}, x}}, metadata).ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metadata(), metadata);
  EXPECT_THAT(f->names(), ElementsAre("x"));  // __metadata__ is not a tensor
}

TEST(Safetensors, CopiesShareTheBytesAndOutliveTheOriginal) {
  const std::string path = TempPath("copy.safetensors");
  const std::vector<float> x = {1, 2, 3};
  ASSERT_TRUE(WriteSafetensors(path, {{"x", {3}, x}}, {}).ok());
  std::optional<SafetensorsFile> copy;
  {
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status();
    copy = *f;
  }
  std::vector<float> out(3);
  ASSERT_TRUE(copy->ReadFloat32("x", {3}, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, x);
}

TEST(Safetensors, ReadFloat32ChecksNameShapeAndOutputSize) {
  const std::string path = TempPath("shapes.safetensors");
  std::vector<float> w(256 * 768, 0.5f);
  ASSERT_TRUE(WriteSafetensors(path, {{"h.0.attn.c_attn.weight", {256, 768}, w}}, {}).ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> out(256 * 512);
  ExpectError(f->ReadFloat32("h.0.attn.c_attn.weight", {256, 512}, absl::MakeSpan(out)),
              absl::StatusCode::kInvalidArgument, path,
              {"h.0.attn.c_attn.weight has shape [256, 768], expected [256, 512]"});
  ExpectError(f->ReadFloat32("h.0.attn.c_attn.weight", {256, 768, 1}, absl::MakeSpan(out)),
              absl::StatusCode::kInvalidArgument, path, {"expected [256, 768, 1]"});
  ExpectError(f->ReadFloat32("h.0.attn.c_attn.weight", {256, 768}, absl::MakeSpan(out)),
              absl::StatusCode::kInvalidArgument, path, {"196608 elements", "output holds 131072"});
  ExpectError(f->ReadFloat32("h.0.attn.c_proj.weight", {256, 512}, absl::MakeSpan(out)),
              absl::StatusCode::kNotFound, path, {"no tensor named h.0.attn.c_proj.weight"});
}

TEST(Safetensors, OpenMissingFileIsNotFound) {
  const std::string path = TempPath("does_not_exist.safetensors");
  ExpectError(SafetensorsFile::Open(path).status(), absl::StatusCode::kNotFound, path, {});
}

TEST(Safetensors, OpenRejectsEachCorruptionWithAMessageNamingIt) {
  const std::string f32x4 = FloatBytes({1, 2, 3, 4});
  struct Case {
    std::string label;
    std::string bytes;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"short", "abcde", {"file is 5 bytes, too short for the 8-byte header length"}},
      {"header_len",
       std::string("\x64\0\0\0\0\0\0\0", 8) + "{}",
       {"header length 100 is larger than the 2 bytes"}},
      {"huge_header_len",
       std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}",
       {"header length", "larger than the 2 bytes"}},
      {"not_json",
       MakeFile(R"({"w": {"dtype": "F32",)", f32x4),
       {"header is not valid JSON", "at byte"}},
      {"not_object", MakeFile("[1, 2]", ""), {"header is not a JSON object"}},
      {"entry_not_object", MakeFile(R"({"w": 3})", ""), {"tensor w: entry is not a JSON object"}},
      {"no_dtype",
       MakeFile(R"({"w": {"shape": [4], "data_offsets": [0, 16]}})", f32x4),
       {"tensor w: missing \"dtype\""}},
      {"no_shape",
       MakeFile(R"({"w": {"dtype": "F32", "data_offsets": [0, 16]}})", f32x4),
       {"tensor w: missing \"shape\""}},
      {"no_offsets",
       MakeFile(R"({"w": {"dtype": "F32", "shape": [4]}})", f32x4),
       {"tensor w: missing \"data_offsets\""}},
      {"unknown_dtype",
       MakeFile(R"({"w": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}})", f32x4),
       {"tensor w: unknown dtype \"Q4\" (accepted: F32, BF16, F16)"}},
      {"unsupported_dtype",
       MakeFile(R"({"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", f32x4),
       {"tensor w: dtype F64 is not supported: dtrain reads F32, BF16 and F16 tensors"}},
      {"integer_dtype",
       MakeFile(R"({"w": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", f32x4),
       {"tensor w: dtype I64 is not supported"}},
      {"extra_field",
       MakeFile(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16], "x": 1}})", f32x4),
       {"tensor w: unexpected field \"x\""}},
      {"negative_dim",
       MakeFile(R"({"w": {"dtype": "F32", "shape": [-2, -2], "data_offsets": [0, 16]}})", f32x4),
       {"tensor w: negative dimension -2 in shape [-2, -2]"}},
      {"float_dim",
       MakeFile(R"({"w": {"dtype": "F32", "shape": [4.0], "data_offsets": [0, 16]}})", f32x4),
       {"tensor w: \"shape\" must be an array of int64 integers"}},
      {"offsets_not_pair",
       MakeFile(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})", f32x4),
       {"tensor w: \"data_offsets\" is not an array of two integers"}},
      {"begin_after_end",
       MakeFile(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", f32x4),
       {"tensor w: data_offsets [8, 4] need 0 <= begin <= end"}},
      {"negative_begin",
       MakeFile(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", f32x4),
       {"tensor w: data_offsets [-4, 0] need 0 <= begin <= end"}},
      {"beyond_data",
       MakeFile(R"({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", f32x4),
       {"tensor w: data_offsets [0, 32] exceed the data section of 16 bytes"}},
      {"size_mismatch",
       MakeFile(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", f32x4),
       {"tensor w: data_offsets [0, 12] span 12 bytes, but shape [2, 2] of F32 needs 4 * 4 bytes"}},
      {"size_mismatch_bf16",
       MakeFile(R"({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 16]}})", f32x4),
       {"tensor w: data_offsets [0, 16] span 16 bytes, but shape [4] of BF16 needs 4 * 2 bytes"}},
      {"overlap",
       MakeFile(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},)"
                R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                f32x4),
       {"tensors a [0, 12) and b [8, 16) overlap"}},
      {"metadata_not_object",
       MakeFile(R"({"__metadata__": [1]})", ""),
       {"__metadata__ is not a JSON object"}},
      {"metadata_not_string",
       MakeFile(R"({"__metadata__": {"step": 5}})", ""),
       {"__metadata__ value of \"step\" is not a string"}},
      {"duplicate_tensor",
       MakeFile(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                f32x4),
       {"duplicate key \"w\""}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = TempPath(c.label + ".safetensors");
    WriteRaw(path, c.bytes);
    ExpectError(SafetensorsFile::Open(path).status(), absl::StatusCode::kInvalidArgument, path,
                c.parts);
  }
}

TEST(Safetensors, AcceptsSpacePaddingGapsAndEmptyTensorsInsideOthers) {
  const std::string path = TempPath("lenient.safetensors");
  WriteRaw(path, MakeFile(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                          R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]},)"
                          R"( "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [4, 4]}}   )",
                          FloatBytes({1, 2, 3, 4})));
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> out(1);
  ASSERT_TRUE(f->ReadFloat32("b", {1}, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], 4.0f);
}

TEST(Safetensors, TruncatedFileIsRejected) {
  const std::string path = TempPath("truncated.safetensors");
  const std::vector<float> x = {1, 2, 3, 4};
  ASSERT_TRUE(WriteSafetensors(path, {{"x", {4}, x}}, {}).ok());
  const std::string whole = ReadRaw(path);

  WriteRaw(path, whole.substr(0, whole.size() - 4));  // last float missing
  ExpectError(
      SafetensorsFile::Open(path).status(), absl::StatusCode::kInvalidArgument, path,
      {"tensor x: data_offsets [0, 16] exceed the data section of 12 bytes (truncated file?)"});
  WriteRaw(path, whole.substr(0, 20));  // cut inside the header
  ExpectError(SafetensorsFile::Open(path).status(), absl::StatusCode::kInvalidArgument, path,
              {"is larger than the 12 bytes after the length field (truncated file?)"});
}

// A head shorter than what its file size promises (fuzz/safetensors_fuzzer found this one
// threw std::out_of_range): an error naming how much was read.
TEST(Safetensors, ParseHeaderOfAShortHeadIsAnErrorNotAThrow) {
  ExpectError(SafetensorsFile::ParseHeader(std::string("\x01\0\0\0\0\0", 6), 100, "f").status(),
              absl::StatusCode::kInvalidArgument, "f",
              {"only 6 bytes of the file were read, fewer than the 8-byte header length"});
  ExpectError(
      SafetensorsFile::ParseHeader(std::string("\x10\0\0\0\0\0\0\0{}", 10), 100, "f").status(),
      absl::StatusCode::kInvalidArgument, "f",
      {"header length 16 but only 2 bytes of it were read"});
}

TEST(Safetensors, WriteLeavesNoTempFileAndReplacesAnExistingFile) {
  const std::string dir = MakeDir("atomic_ok");
  const std::string path = dir + "/ckpt.safetensors";
  const std::vector<float> v1 = {1}, v2 = {2, 3};
  ASSERT_TRUE(WriteSafetensors(path, {{"x", {1}, v1}}, {}).ok());
  ASSERT_TRUE(WriteSafetensors(path, {{"y", {2}, v2}}, {}).ok());
  EXPECT_THAT(ListDir(dir), ElementsAre("ckpt.safetensors"));
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_THAT(f->names(), ElementsAre("y"));
}

TEST(Safetensors, FailedWriteLeavesTheExistingFileUntouched) {
  const std::string dir = MakeDir("atomic_fail");
  const std::string path = dir + "/ckpt.safetensors";
  const std::vector<float> old_data = {1, 2}, new_data = {5, 6, 7};
  ASSERT_TRUE(WriteSafetensors(path, {{"x", {2}, old_data}}, {{"step", "1"}}).ok());
  const std::string old_bytes = ReadRaw(path);

  // The temp file cannot be created: a directory sits at "<path>.tmp.<pid>".
  const std::string temp = absl::StrCat(path, ".tmp.", getpid());
  ASSERT_EQ(mkdir(temp.c_str(), 0755), 0);
  absl::Status s = WriteSafetensors(path, {{"x", {3}, new_data}}, {{"step", "2"}});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(temp));
  EXPECT_EQ(ReadRaw(path), old_bytes);
  rmdir(temp.c_str());

  // Bad input is refused before anything is written.
  ExpectError(WriteSafetensors(path, {{"x", {2, 2}, new_data}}, {}),
              absl::StatusCode::kInvalidArgument, path,
              {"tensor x: shape [2, 2] has 4 elements, but the data holds 3"});
  EXPECT_EQ(ReadRaw(path), old_bytes);
  EXPECT_THAT(ListDir(dir), ElementsAre("ckpt.safetensors"));
}

TEST(Safetensors, WriteIntoMissingDirectoryFailsAndCreatesNothing) {
  const std::string path = TempPath("no_such_dir/ckpt.safetensors");
  const std::vector<float> x = {1};
  ExpectError(WriteSafetensors(path, {{"x", {1}, x}}, {}), absl::StatusCode::kNotFound, path,
              {"cannot create"});
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(TempPath("no_such_dir")));
}

TEST(Safetensors, WriteRejectsBadTensorLists) {
  const std::string path = TempPath("bad_input.safetensors");
  const std::vector<float> x = {1, 2};
  ExpectError(WriteSafetensors(path, {{"x", {2}, x}, {"x", {2}, x}}, {}),
              absl::StatusCode::kInvalidArgument, path, {"tensor x appears twice"});
  ExpectError(WriteSafetensors(path, {{"__metadata__", {2}, x}}, {}),
              absl::StatusCode::kInvalidArgument, path,
              {"cannot write a tensor named \"__metadata__\""});
  ExpectError(WriteSafetensors(path, {{"", {2}, x}}, {}), absl::StatusCode::kInvalidArgument, path,
              {"cannot write a tensor named \"\""});
  ExpectError(WriteSafetensors(path, {{"x", {-1, -2}, x}}, {}), absl::StatusCode::kInvalidArgument,
              path, {"tensor x: bad shape [-1, -2]"});
  EXPECT_FALSE(Exists(path));
}

}  // namespace
}  // namespace model
}  // namespace dtrain
