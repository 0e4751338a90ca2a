// The on-disk description of a checkpoint (docs/DATA_FORMATS.md, "Sharded checkpoints").
//
// A job (of one worker or many) saves step N as one directory of per-rank safetensors files
// plus manifest.json, which rank 0 writes last:
//
//   DIR/step_00000042/model-pp1-tp0-c0.safetensors          parameters of one chunk (dp 0 only)
//   DIR/step_00000042/optimizer-dp1-pp1-tp0-c0.safetensors  AdamW moments of one chunk's range
//   DIR/step_00000042/manifest.json                         what makes the step complete
//   DIR/latest                                              "step_00000042", moved last
//
// The format is layout-free (since version 2): every stored array names its GPT-2 tensor, that
// tensor's global shape and where the array's elements sit in it (TensorShard: boxes of the
// global tensor and a flat range of them), as PyTorch DCP and Megatron's ShardedTensor do. A
// job of any layout loads a step by intersecting what each of its ranks holds with what was
// stored. Each element is stored once: tensors replicated over tp by tp rank 0 only, the tied
// head's copy of wte not at all (the embedding's is the same).
//
// The manifest names every file with its coordinates, its arrays, size and XXH3-64 checksum, so
// a reader never trusts a half-written step (no manifest) or a damaged file (size or checksum
// differs), and (version 3) the manifest's checksum of its own bytes, so that an altered step
// number, data position or AdamW step count is found too. The manifest is the protobuf message
// dtrain.CheckpointManifest (proto/checkpoint.proto) in protobuf's JSON mapping. This header holds
// the data types, the file names, the checksum, the manifest's JSON, reading a step's manifest, the
// verified read of a listed file and the geometry of stored arrays; the save/load logic is in
// sharded_checkpoint.h, the export in checkpoint_export.h. None of it links the model or the
// kernels.
#ifndef DTRAIN_WORKER_PARALLEL_MANIFEST_H_
#define DTRAIN_WORKER_PARALLEL_MANIFEST_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/checkpoint.pb.h"
#include "worker/model/config.h"
#include "worker/model/parameter_layout.h"
#include "worker/model/safetensors.h"

namespace dtrain::parallel {

// Step directories and `latest` are named by common/job_paths.h (StepDirName, kLatestFileName).
inline constexpr char kManifestFileName[] = "manifest.json";
inline constexpr char kManifestFormat[] = "dtrain-sharded-checkpoint";
inline constexpr int kManifestVersion = 3;        // written
inline constexpr int kOldestReadableVersion = 2;  // read: 2 (no checksum of its own) and 3
// A manifest larger than model::kMaxManifestBytes (checkpoint_dir.h) is refused unread.

// The parallel layout a checkpoint was written under: which files a complete step has. A
// resume may use any other.
struct CheckpointLayout {
  int dp = 1, pp = 1, tp = 1;
  int virtual_stages = 1;
  bool zero1 = false;
};

enum class ShardFileKind { kModel, kOptimizer };

// How a manifest's file checksums are computed. dtrain writes XXH3; older version 2 manifests
// may hold FNV-1a and are still verified with it (the manifest's "checksum" says which).
enum class ChecksumKind { kXxh3_64, kFnv1a64 };

// "xxh3_64", "fnv1a64": the manifest's "checksum" value and the key of each file's checksum.
absl::string_view ChecksumName(ChecksumKind kind);

// The checksum of `bytes`: XXH3-64 with seed 0 (libxxhash's XXH3_64bits; Python:
// xxhash.xxh3_64_intdigest), or FNV-1a-64 (offset basis 0xcbf29ce484222325, prime
// 0x100000001b3, one byte at a time; about 20 times slower, kept to verify old manifests).
uint64_t ShardChecksum(absl::string_view bytes, ChecksumKind kind = ChecksumKind::kXxh3_64);

// The checksum of everything left to read from open file `fd`, read a piece at a time.
absl::StatusOr<uint64_t> ChecksumOfFile(int fd, ChecksumKind kind);

// How far into the data a step is (dtrain.DataPosition): a resume must read on from there.
struct DataPosition {
  int64_t consumed_sequences = 0;  // by all replicas together: step * batch_size
  int batch_size = 0;              // global
  int seq_len = 0;
};

// Where the data stands after `step` steps of `batch_size` sequences of `seq_len` tokens (the
// one rule both trainers save and resume with).
inline DataPosition DataPositionAfter(int64_t step, int batch_size, int seq_len) {
  return {step * batch_size, batch_size, seq_len};
}

// One stored array and where its elements sit in the GPT-2 tensor `tensor` (dtrain.TensorShard):
// `boxes` of the global tensor, concatenated along the last dim in order, make a local tensor
// (model::ShardBoxes: a tensor-parallel shard), and the array is its elements
// [flat_begin, flat_end) in row-major order.
struct TensorShard {
  std::string tensor;
  std::vector<int64_t> global_shape;
  std::vector<model::TensorBox> boxes;
  int64_t flat_begin = 0, flat_end = 0;

  int64_t size() const { return flat_end - flat_begin; }
};

// The shape an array is stored with: the local tensor's when it is whole, else [size()].
std::vector<int64_t> StoredShape(const TensorShard& shard);

// `size` elements of a stored array from index `stored` are the global tensor's (row-major)
// elements from index `global`.
struct ShardRun {
  int64_t global = 0, stored = 0, size = 0;
};

// The runs of `shard`, by global index. DataLoss naming `where` when the boxes do not fit the
// global shape, their leading sizes differ, or the flat range is outside the local tensor.
absl::StatusOr<std::vector<ShardRun>> ShardRuns(const TensorShard& shard, const std::string& where);

// Copies every element `from` (with values `from_values`) and `to` have in common into
// `to_values`; returns how many. Both run lists sorted by global index, as ShardRuns gives them.
int64_t CopyOverlap(absl::Span<const ShardRun> from, absl::Span<const float> from_values,
                    absl::Span<const ShardRun> to, absl::Span<float> to_values);

// One file of a step: its coordinates, the chunk it was written from, and its arrays. The same
// fields are stored in the file's own safetensors metadata and in its manifest entry (plus
// size and checksum), so each file is self-describing and the manifest alone tells what a step
// holds.
struct ShardFile {
  ShardFileKind kind = ShardFileKind::kModel;
  int dp_rank = 0;  // 0 for model files (replicas are identical) and non-ZeRO optimizer files
  int pp_rank = 0;
  int tp_rank = 0;
  int chunk = 0;           // virtual stage on this pipeline rank (model chunk chunk * pp + pp_rank)
  model::StageSpec stage;  // the chunk's layers and ends
  int64_t adam_step = 0;   // optimizer files
  // Model files store each array under its tensor's name, optimizer files under
  // "exp_avg.<tensor>" and "exp_avg_sq.<tensor>".
  std::vector<TensorShard> tensors;
  // Manifest only: the file's size in bytes and the checksum of all its bytes (of the
  // manifest's ChecksumKind).
  int64_t bytes = 0;
  uint64_t checksum = 0;

  // "model-pp1-tp0-c0.safetensors", "optimizer-dp1-pp1-tp0-c0.safetensors".
  std::string FileName() const;
};

// A file's manifest entry and back. ToEntry writes `bytes` and the checksum (under the key of
// `checksum`); FromEntry reads them too and checks the entry (DataLoss naming `where`).
ShardFileEntry ToEntry(const ShardFile& file, ChecksumKind checksum);
absl::StatusOr<ShardFile> FromEntry(const ShardFileEntry& entry, ChecksumKind checksum,
                                    const std::string& where);

// One file a rank writes for a step, complete in memory: what SnapshotShard
// (sharded_checkpoint.h) returns and the checkpoint writer (checkpoint_writer.h) writes. `name`
// is the file's name inside the step directory, `bytes` its whole content (a safetensors file)
// and `entry` its manifest entry with everything but `bytes` and the checksum, which the writer
// fills from what it writes.
struct PendingFile {
  std::string name;
  std::string bytes;
  dtrain::ShardFileEntry entry;
};

struct Manifest {
  int64_t step = 0;
  ChecksumKind checksum = ChecksumKind::kXxh3_64;  // of every file's ShardFile::checksum
  model::GptConfig config;
  CheckpointLayout layout;
  DataPosition data;
  std::vector<ShardFile> files;

  // The entry for a file, or null.
  const ShardFile* Find(ShardFileKind kind, int dp_rank, int pp_rank, int tp_rank, int chunk) const;
};

// The manifest as JSON (protobuf's JSON mapping of dtrain.CheckpointManifest, pretty-printed,
// version 3 with its own checksum) and back. ParseManifest reads versions 2 and 3, accepts
// integers as numbers and FNV-1a checksums. Parse errors are DataLoss naming `path` and the
// problem (malformed JSON, unknown key, wrong format, a missing checksum, a manifest whose
// bytes differ from its own checksum, an entry name that is not a plain file name); a version
// 1 manifest (one layout's local shapes) is FailedPrecondition saying how to carry it over
// (resume it with the dtrain version that wrote it, or export it with that version and start
// from init_checkpoint).
absl::StatusOr<std::string> ManifestToJson(const Manifest& manifest);
absl::StatusOr<Manifest> ParseManifest(absl::string_view json, const std::string& path);

// The manifest's checksum of itself (dtrain.CheckpointManifest.manifest_xxh3_64): OK when the
// bytes of `json` match it; DataLoss naming `path` when they differ or, from version 3 on,
// when it is missing. Version 2 manifests without one pass. ParseManifest calls it.
absl::Status VerifyManifestChecksum(absl::string_view json, int version, const std::string& path);

// Every file a complete step of `layout` holds (coordinates only), in manifest order.
std::vector<ShardFile> ExpectedFiles(const CheckpointLayout& layout);

// Reads the manifest of `path` (a job directory through its `latest`, or a step directory;
// resolved by model::ResolveCheckpoint, whose errors it returns). NotFound when `path` does not
// exist; FailedPrecondition when the step has no manifest. `step_dir` gets the absolute step
// directory. Reads only, through model::OpenStepDirectory (no symlink followed; a manifest
// above model::kMaxManifestBytes refused unread).
// Checks that the manifest lists exactly the files of its layout (DataLoss naming it).
absl::StatusOr<Manifest> ReadManifest(const std::string& path, std::string* step_dir = nullptr);

// A shard file's safetensors metadata ("format", "step" and "entry": its manifest entry as
// JSON, without size and checksum) and back. ParseShardMetadata checks the format and the
// entry (DataLoss naming `path`).
std::map<std::string, std::string> ShardMetadata(const ShardFile& file, int64_t step);
absl::StatusOr<ShardFile> ParseShardMetadata(const std::map<std::string, std::string>& metadata,
                                             int64_t* step, const std::string& path);

// Reads the file of manifest entry `entry` in `step_dir` once, front to back, a piece at a time:
// checksums all its bytes (of `kind`) and hands each array that `wanted(name)` asks for to
// `take` as fp32, one array in memory at a time (so a rank never holds a whole file). What
// `take` got is only trustworthy once this returns OK: the size and checksum are compared at
// the end. Every failure is DataLoss naming the file (missing, another size, another checksum,
// a header that does not parse), or take's error. The file is opened under the step directory
// without following a symlink, and one of another size than its entry says is refused before
// anything is read.
using TakeArray =
    std::function<absl::Status(const model::TensorInfo& info, absl::Span<const float> values)>;
absl::Status ReadVerifiedArrays(const std::string& step_dir, const ShardFile& entry,
                                ChecksumKind kind,
                                const std::function<bool(const std::string& name)>& wanted,
                                const TakeArray& take);

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_MANIFEST_H_
