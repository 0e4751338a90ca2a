// The export of a sharded checkpoint to one GPT-2 safetensors file (dtrain export,
// dtrain-export, and a parallel job's save_path). Reads the shard files through the manifest
// (manifest.h) and links no training code: no model, no kernels, so the CLI can link it.
#ifndef DTRAIN_WORKER_PARALLEL_CHECKPOINT_EXPORT_H_
#define DTRAIN_WORKER_PARALLEL_CHECKPOINT_EXPORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/model/checkpoint_dir.h"

namespace dtrain::parallel {

// Assembles the whole model of a complete step (`path` as for ReadManifest) into one GPT-2
// safetensors file at `out_path`, byte for byte what model::SaveTensors writes for one worker
// holding the whole model (same names and order, matrices (in, out), F32, metadata
// {"step": N}), so LoadWeights, PyTorch and transformers read it. Each stored array is put
// where its TensorShard says it sits (so any layout's step exports the same file). Reads the
// model files one array at a time; DataLoss naming the tensor when the step lacks any of its
// elements, or naming the file on a size or checksum mismatch. Returns the step exported and
// its absolute directory.
absl::StatusOr<model::CheckpointStep> ExportSafetensors(const std::string& path,
                                                        const std::string& out_path);

// What both export commands print after ExportSafetensors returned `exported`:
// "exported step 40 of /abs/ckpt/job-000003 to out.safetensors" (the step's job directory).
std::string ExportSummary(const model::CheckpointStep& exported, const std::string& out_path);

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_CHECKPOINT_EXPORT_H_
