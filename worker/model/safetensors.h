// Reading and writing Hugging Face safetensors files (docs/DATA_FORMATS.md has the layout and the
// limits we accept).
//
//   ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open("gpt2.safetensors"));
//   std::vector<float> wte(V * C);
//   RETURN_IF_ERROR(f.ReadFloat32("wte.weight", {V, C}, absl::MakeSpan(wte)));
//
//   RETURN_IF_ERROR(WriteSafetensors("ckpt.safetensors", {{"wte.weight", {V, C}, wte}},
//                                    {{"step", "100"}}, DType::kBF16));
//
// Every error names the file, and the tensor where one is involved. Malformed files give
// InvalidArgument; a missing file NotFound; other I/O errors the code of their errno.
// A host with little-endian byte order is assumed (x86-64, aarch64).
#ifndef DTRAIN_WORKER_MODEL_SAFETENSORS_H_
#define DTRAIN_WORKER_MODEL_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dtrain {
namespace model {

enum class DType { kF32, kBF16, kF16 };

// "F32", "BF16", "F16": the dtype strings of the safetensors header.
absl::string_view DTypeName(DType dtype);
// Bytes per element: 4, 2, 2.
int64_t DTypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;    // byte offsets in the data section, [begin, end)
  int64_t num_elements() const;  // product of shape; 1 for a scalar (shape [])
};

// An opened, fully validated safetensors file held in memory. Copies are cheap and share the
// (immutable) bytes.
class SafetensorsFile {
 public:
  // Reads and validates the whole file. Errors name the file and the problem.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  // Validates `bytes`, the contents of the file at `path` (named in errors), already read (to
  // checksum them first, say). The one safetensors header reader: every dtrain reader of
  // safetensors headers (tensors or only "__metadata__") goes through Open or Parse.
  static absl::StatusOr<SafetensorsFile> Parse(std::string bytes, const std::string& path);
  // The same for the first bytes of a file of `file_size` bytes: at least the length field and
  // the header (a file read in pieces). Tensors are then read with DecodeFloat32 from bytes the
  // caller read (ReadFloat32 needs the whole file).
  static absl::StatusOr<SafetensorsFile> ParseHeader(std::string head, int64_t file_size,
                                                     const std::string& path);
  // Where the data section starts: 8 + the header's length. TensorInfo offsets are from there.
  int64_t data_start() const { return data_start_; }

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }                                                      // "__metadata__"
  std::vector<std::string> names() const;                // sorted
  const TensorInfo* Find(absl::string_view name) const;  // null if absent

  // Reads tensor `name` converted to fp32 (F32, BF16, F16 accepted) into `out`, checking that its
  // shape equals expected_shape and out.size() equals its element count.
  // NotFound (no such tensor) / InvalidArgument (wrong shape, e.g. "... h.0.attn.c_attn.weight has
  // shape [256, 768], expected [256, 512]", or wrong output size), naming file and tensor.
  absl::Status ReadFloat32(absl::string_view name, absl::Span<const int64_t> expected_shape,
                           absl::Span<float> out) const;
  // ReadFloat32 of the tensor's bytes `raw` (its [begin, end) of the data section), read by the
  // caller.
  absl::Status DecodeFloat32(absl::string_view name, absl::Span<const int64_t> expected_shape,
                             absl::string_view raw, absl::Span<float> out) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::shared_ptr<const std::string> bytes_;  // the whole file
  int64_t data_start_ = 0;                    // offset of the data section in bytes_
  bool has_data_ = true;                      // false: bytes_ is only the header (ParseHeader)
};

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  absl::Span<const float> data;  // row-major, num_elements(shape) floats
};

// Writes fp32 (or bf16 / f16, each rounded to nearest even) tensors + metadata atomically: to
// "<path>.tmp.<pid>", fsync, rename, so a crash never leaves a half file at `path`.
// Header keys are sorted; tensors are laid out contiguously in the given order; the header is
// padded with spaces so the data section starts at an 8-byte aligned offset.
// InvalidArgument for bad input (empty, duplicate or reserved "__metadata__" name, negative dim,
// data size != shape); I/O errors carry their errno's code. On any error `path` is untouched.
absl::Status WriteSafetensors(const std::string& path, absl::Span<const TensorToWrite> tensors,
                              const std::map<std::string, std::string>& metadata,
                              DType dtype = DType::kF32);

// Copies `bytes` of tensor data from `src` to the host buffer `dst` (memcpy, or a device's
// Backend::CopyToHost when `src` is device memory).
using CopyTensorData = absl::FunctionRef<absl::Status(void* dst, const float* src, size_t bytes)>;

// The bytes WriteSafetensors would write for fp32 `tensors`, in memory (a checkpoint snapshot,
// written later by another thread), made in one pass: the file is sized once and `copy` puts
// each tensor's data straight into its place, so each `data` may point into device memory (the
// span's size is all that is read here) and the result is the only host copy of the state.
// `name` names the file in errors.
absl::StatusOr<std::string> SafetensorsBytes(const std::string& name,
                                             absl::Span<const TensorToWrite> tensors,
                                             const std::map<std::string, std::string>& metadata,
                                             CopyTensorData copy);

// Element conversions used by the reader and writer, exposed for kernels and tests.
float Bf16ToFloat(uint16_t bits);   // exact: the upper 16 bits of an fp32
uint16_t FloatToBf16(float value);  // round to nearest even; NaN stays NaN
float F16ToFloat(uint16_t bits);    // exact, including subnormals, infinities and NaN
uint16_t FloatToF16(float value);   // round to nearest even; overflow gives inf; NaN stays NaN

}  // namespace model
}  // namespace dtrain

#endif  // DTRAIN_WORKER_MODEL_SAFETENSORS_H_
