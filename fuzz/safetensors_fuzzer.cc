// Fuzzes the safetensors reader (worker/model/safetensors.h) on any bytes as a whole file and as
// the head of a file, and the header's JSON parser (header_json.h) on its own: errors, never a
// crash. A file that parses has each tensor read as fp32 at its own shape.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/model/header_json.h"
#include "worker/model/safetensors.h"

namespace dtrain::model {
namespace {

void ReadEveryTensor(const SafetensorsFile& file, const std::string& bytes, bool whole) {
  for (const std::string& name : file.names()) {
    const TensorInfo* info = file.Find(name);
    if (info == nullptr) __builtin_trap();                    // names() lists what Find finds
    if (info->num_elements() > (int64_t{1} << 20)) continue;  // bounded by the input anyway
    std::vector<float> out(info->num_elements());
    if (whole) {
      (void)file.ReadFloat32(name, info->shape, absl::MakeSpan(out));
    } else if (file.data_start() + info->end <= static_cast<int64_t>(bytes.size())) {
      const absl::string_view raw =
          absl::string_view(bytes).substr(file.data_start() + info->begin, info->end - info->begin);
      (void)file.DecodeFloat32(name, info->shape, raw, absl::MakeSpan(out));
    }
  }
}

}  // namespace
}  // namespace dtrain::model

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dtrain::model::SafetensorsFile;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)dtrain::model::ParseJson(bytes);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Parse(bytes, "fuzz.safetensors");
  if (file.ok()) dtrain::model::ReadEveryTensor(*file, bytes, /*whole=*/true);
  // The same bytes as the head of a file twice as long (read in pieces).
  absl::StatusOr<SafetensorsFile> head =
      SafetensorsFile::ParseHeader(bytes, 2 * static_cast<int64_t>(size), "fuzz.safetensors");
  if (head.ok()) dtrain::model::ReadEveryTensor(*head, bytes, /*whole=*/false);
  return 0;
}
