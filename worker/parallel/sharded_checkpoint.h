// Checkpoints of every training job (one worker is the layout dp=pp=tp=1): every rank snapshots
// its own shard files, rank 0 seals the step with a manifest, and any layout resumes a step
// (the format is layout-free: manifest.h) or exports it to one GPT-2 safetensors file
// (checkpoint_export.h). Formats: manifest.h and docs/DATA_FORMATS.md ("Sharded checkpoints").
//
// Saving step N, in the background (checkpoint_writer.h):
//
//   ASSIGN_OR_RETURN(std::vector<PendingFile> files, SnapshotShard(N, id, chunks, optimizers));
//   writer.Submit(N, std::move(files), ...);   // rank 0's writer calls SealStep with all entries
//
// or in the foreground, every rank, then rank 0:
//
//   RETURN_IF_ERROR(SaveShard(dir, N, id, chunks, optimizers));   // every rank
//   <barrier over all ranks>
//   if (rank == 0) RETURN_IF_ERROR(WriteManifest(dir, N, id.layout(), config, data));
//
// and for resuming, every rank, whatever layout wrote the step:
//   ASSIGN_OR_RETURN(int64_t step, LoadShard(path, id, chunks, opts, data));
// The directory must be one file system that every rank writes and rank 0 reads (shared or
// local to a one-machine job).
#ifndef DTRAIN_WORKER_PARALLEL_SHARDED_CHECKPOINT_H_
#define DTRAIN_WORKER_PARALLEL_SHARDED_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/model/checkpoint.h"
#include "worker/model/config.h"
#include "worker/model/gpt_stage.h"
#include "worker/model/held_directory.h"
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

// This rank's files of step `step`, complete in memory (the writer fills size and checksum):
//  * dp_rank 0 only (replicas hold identical parameters): one model file per chunk;
//  * every dp rank with ZeRO-1, only dp_rank 0 without: one optimizer file per chunk, the moments
//    of the optimizer's range, each tensor's piece of the range as "exp_avg.<name>" and
//    "exp_avg_sq.<name>".
// Every array is described by a TensorShard (global shape, boxes, flat range) so any layout can
// load it. Each element is stored once: tensors replicated over tp by tp rank 0 only, and the
// head's tied copy of wte not at all (the embedding chunk stores wte). Copies the state to the
// host and touches no file. InvalidArgument when `id`, the chunks and the optimizers disagree
// (counts, tp spec, ranges).
absl::StatusOr<std::vector<PendingFile>> SnapshotShard(int64_t step, const ShardIdentity& id,
                                                       absl::Span<model::GptStage* const> chunks,
                                                       absl::Span<model::AdamW* const> optimizers);

// Rank 0, once every rank's files of `step` are durable in DIR/step_N/: checks that `entries`
// (every rank's, with size and XXH3 checksum) make the complete step of `layout` (each file
// the layout implies exactly once, every element of every tensor and of both moments stored
// exactly once, one AdamW step count; FailedPrecondition naming what is missing), then writes
// DIR/step_N/manifest.json atomically and points DIR/latest at step_N. Reads no shard file.
// The held job directory's (checkpoint_writer.h) or, by path, one opened for the call.
absl::Status SealStep(const model::HeldDirectory& dir, int64_t step, const model::GptConfig& config,
                      const CheckpointLayout& layout, const DataPosition& data,
                      std::vector<ShardFileEntry> entries);
absl::Status SealStep(const std::string& dir, int64_t step, const model::GptConfig& config,
                      const CheckpointLayout& layout, const DataPosition& data,
                      std::vector<ShardFileEntry> entries);

// SnapshotShard written into DIR/step_<%08d>/ (creating both directories), each file
// atomically. A step directory that already holds a manifest is sealed and is never written
// again: FailedPrecondition naming it, before any file is touched (every rank checks, so all
// of them refuse). An unsealed one (a save that did not finish) is overwritten.
absl::Status SaveShard(const std::string& dir, int64_t step, const ShardIdentity& id,
                       absl::Span<model::GptStage* const> chunks,
                       absl::Span<model::AdamW* const> optimizers);

// Rank 0, after every rank's SaveShard returned: reads every file `layout` implies back
// (FailedPrecondition naming the first missing one), takes its entry from its metadata and its
// checksum from its bytes, and seals the step (SealStep).
absl::Status WriteManifest(const std::string& dir, int64_t step, const CheckpointLayout& layout,
                           const model::GptConfig& config, const DataPosition& data);

// Resume on any layout: fills this rank's chunks' parameters and, unless `optimizers` is empty
// (loading weights only), the optimizers' moments and step, from the stored arrays that
// overlap what this rank holds (its tensors' tp shards, its ZeRO-1 ranges). `path` as for
// ReadManifest. FailedPrecondition naming what differs when the model config differs, or, with
// job.batch_size > 0, when the batch or seq_len differs from the step's data position (the
// data would not go on where it stopped). Reads only the files it needs, one stored array in
// memory at a time (ReadVerifiedArrays), each file checked against the manifest's size and
// checksum (DataLoss naming the file); DataLoss naming the tensor when the step lacks elements
// this rank needs. Nothing is changed unless everything was read. Returns the checkpoint's step.
absl::StatusOr<int64_t> LoadShard(const std::string& path, const ShardIdentity& id,
                                  absl::Span<model::GptStage* const> chunks,
                                  absl::Span<model::AdamW* const> optimizers,
                                  const DataPosition& job);

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_SHARDED_CHECKPOINT_H_
