// Checkpoints of multi-worker (dp x pp x tp) jobs: every rank writes its own shard files, rank 0
// seals the step with a manifest, and a step can be resumed by the same layout or exported to
// one GPT-2 safetensors file. Formats: manifest.h and docs/DATA_FORMATS.md ("Sharded
// checkpoints").
//
// The trainer's protocol for saving step N (every rank, then rank 0):
//
//   RETURN_IF_ERROR(SaveShard(dir, N, id, chunks, optimizers));   // every rank
//   <barrier over all ranks>
//   if (rank == 0) RETURN_IF_ERROR(WriteManifest(dir, N, id, config));
//
// and for resuming, every rank: ASSIGN_OR_RETURN(int64_t step, LoadShard(path, id, chunks, opts)).
// Reading a manifest (ReadManifest) is in manifest.h, the export in checkpoint_export.h.
// The directory must be one file system that every rank writes and rank 0 reads (shared or
// local to a one-machine job): WriteManifest reads every shard file back to checksum it.
#ifndef DTRAIN_WORKER_PARALLEL_SHARDED_CHECKPOINT_H_
#define DTRAIN_WORKER_PARALLEL_SHARDED_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/model/checkpoint.h"
#include "worker/model/config.h"
#include "worker/model/gpt_stage.h"
#include "worker/model/optimizer.h"
#include "worker/parallel/checkpoint_export.h"
#include "worker/parallel/manifest.h"

namespace dtrain::parallel {

// Where this rank sits: rank = (dp_rank * pp + pp_rank) * tp + tp_rank.
struct ShardIdentity {
  int dp_rank = 0, pp_rank = 0, tp_rank = 0;
  int dp = 1, pp = 1, tp = 1;  // layout sizes
  int virtual_stages = 1;      // chunks per pipeline rank
  bool zero1 = false;          // optimizer state split over the data-parallel ranks

  CheckpointLayout layout() const { return {dp, pp, tp, virtual_stages, zero1}; }
};

// Writes this rank's files into DIR/step_<%08d>/ (creating both directories):
//  * dp_rank 0 only (replicas hold identical parameters): one model file per chunk, the
//    chunk's tensors with GPT-2 names and local (tensor-parallel) shapes;
//  * every dp rank with ZeRO-1, only dp_rank 0 without: one optimizer file per chunk, the
//    moments of the optimizer's range [range_begin, range_end) as flat "exp_avg" and
//    "exp_avg_sq".
// Each file carries its coordinates, the chunk's layers, the optimizer range and AdamW step as
// metadata and is written atomically. A step directory that already holds a manifest is sealed
// and is never written again: FailedPrecondition naming it, before any file is touched (every
// rank checks, so all of them refuse). An unsealed one (a save that did not finish) is
// overwritten. InvalidArgument when `id`, the chunks and the optimizers disagree (counts, tp
// spec, ranges).
absl::Status SaveShard(const std::string& dir, int64_t step, const ShardIdentity& id,
                       absl::Span<model::GptStage* const> chunks,
                       absl::Span<model::AdamW* const> optimizers);

// Rank 0, after every rank's SaveShard returned: checks that every file the layout implies
// exists and describes itself consistently (FailedPrecondition naming the first missing file),
// checksums each, writes DIR/step_N/manifest.json atomically and then points DIR/latest at
// step_N (atomically). Only `layout` of `id` is used. A step directory without a manifest is
// incomplete: LoadShard and ExportSafetensors refuse it.
absl::Status WriteManifest(const std::string& dir, int64_t step, const ShardIdentity& id,
                           const model::GptConfig& config);

// Resume: fills this rank's chunks' parameters and, unless `optimizers` is empty (loading
// weights only), the optimizers' moments and step. `path` as for ReadManifest. Requires the
// checkpoint's model config and layout to equal this job's (FailedPrecondition naming what
// differs: "checkpoint has pp=2 but the job has pp=4"), as well as each chunk's layers and
// each optimizer's range. Every file read is checked against the manifest's size and checksum
// (DataLoss naming the file). Returns the checkpoint's step.
absl::StatusOr<int64_t> LoadShard(const std::string& path, const ShardIdentity& id,
                                  absl::Span<model::GptStage* const> chunks,
                                  absl::Span<model::AdamW* const> optimizers);

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_SHARDED_CHECKPOINT_H_
