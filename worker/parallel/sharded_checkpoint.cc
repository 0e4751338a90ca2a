#include "worker/parallel/sharded_checkpoint.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "worker/model/safetensors.h"

namespace dtrain::parallel {
namespace {

using model::GptStage;
using model::ParameterLayout;
using model::ParameterTensor;
using model::StageSpec;

absl::Status CheckIdentity(const ShardIdentity& id) {
  if (id.dp < 1 || id.pp < 1 || id.tp < 1 || id.virtual_stages < 1 || id.dp_rank < 0 ||
      id.dp_rank >= id.dp || id.pp_rank < 0 || id.pp_rank >= id.pp || id.tp_rank < 0 ||
      id.tp_rank >= id.tp) {
    return absl::InvalidArgumentError(absl::StrCat("invalid shard identity: dp_rank=", id.dp_rank,
                                                   " pp_rank=", id.pp_rank, " tp_rank=", id.tp_rank,
                                                   " of dp=", id.dp, " pp=", id.pp, " tp=", id.tp,
                                                   " virtual_stages=", id.virtual_stages));
  }
  return absl::OkStatus();
}

// The chunks and optimizers must be the ones `id` describes. `optimizers` may be empty when
// `optional_optimizers` (loading weights only).
absl::Status CheckChunks(const ShardIdentity& id, absl::Span<GptStage* const> chunks,
                         absl::Span<model::AdamW* const> optimizers, bool optional_optimizers) {
  RETURN_IF_ERROR(CheckIdentity(id));
  if (static_cast<int>(chunks.size()) != id.virtual_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat(chunks.size(), " chunks for virtual_stages=", id.virtual_stages));
  }
  if (optimizers.size() != chunks.size() && !(optional_optimizers && optimizers.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat(optimizers.size(), " optimizers for ", chunks.size(), " chunks"));
  }
  for (size_t j = 0; j < chunks.size(); ++j) {
    if (chunks[j] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", j, " is null"));
    }
    const model::TensorParallelSpec& tp = chunks[j]->tp();
    if (tp.rank != id.tp_rank || tp.size != id.tp) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", j, " is tp rank ", tp.rank, " of ",
                                                     tp.size, " but the identity says ", id.tp_rank,
                                                     " of ", id.tp));
    }
    if (!optimizers.empty()) {
      const model::AdamW* opt = optimizers[j];
      if (opt == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("optimizer ", j, " is null"));
      }
      if (opt->range_begin() < 0 || opt->range_begin() > opt->range_end() ||
          opt->range_end() > chunks[j]->layout().total_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "optimizer ", j, " covers [", opt->range_begin(), ", ", opt->range_end(),
            ") outside chunk ", j, "'s ", chunks[j]->layout().total_size(), " parameters"));
      }
    }
  }
  return absl::OkStatus();
}

ShardFile ChunkFile(ShardFileKind kind, const ShardIdentity& id, int chunk,
                    const StageSpec& stage) {
  ShardFile f;
  f.kind = kind;
  f.dp_rank = kind == ShardFileKind::kOptimizer && id.zero1 ? id.dp_rank : 0;
  f.pp_rank = id.pp_rank;
  f.tp_rank = id.tp_rank;
  f.chunk = chunk;
  f.stage = stage;
  return f;
}

// Whether this rank stores `t` of `stage`: each element once over the job.
bool StoresTensor(const ParameterTensor& t, const StageSpec& stage, const ShardIdentity& id) {
  if (t.name == "wte.weight" && !stage.has_embedding) return false;  // the head's tied copy
  return t.shard != model::ShardKind::kReplicated || id.tp_rank == 0;
}

// The elements [begin, end) of rank `tp`'s local shard of `t` as a TensorShard.
TensorShard LocalPiece(const ParameterTensor& t, const model::TensorParallelSpec& tp, int64_t begin,
                       int64_t end) {
  return {t.name, t.global_shape, model::ShardBoxes(t, tp), begin, end};
}

// The file of `tensors`, whose data is in `backend`'s memory, copied from there once.
absl::StatusOr<PendingFile> Pending(const ShardFile& f, int64_t step,
                                    absl::Span<const model::TensorToWrite> tensors,
                                    kernels::Backend* backend) {
  PendingFile out;
  out.name = f.FileName();
  ASSIGN_OR_RETURN(out.bytes,
                   model::SafetensorsBytes(out.name, tensors, ShardMetadata(f, step),
                                           [backend](void* dst, const float* src, size_t bytes) {
                                             return backend->CopyToHost(dst, src, bytes);
                                           }));
  out.entry = ToEntry(f, ChecksumKind::kXxh3_64);
  out.entry.clear_bytes();  // the writer's to fill from what it writes
  out.entry.clear_xxh3_64();
  return out;
}

absl::Status ToDevice(kernels::Backend* backend, float* device, const std::vector<float>& host) {
  if (host.empty()) return absl::OkStatus();
  return backend->CopyToDevice(device, host.data(), host.size() * sizeof(float));
}

template <typename T>
absl::Status SameValue(absl::string_view field, T checkpoint, T job) {
  if (checkpoint == job) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("checkpoint has ", field, "=", checkpoint,
                                                    " but the job has ", field, "=", job));
}

absl::Status CheckCompatible(const Manifest& m, const model::GptConfig& c,
                             const DataPosition& job) {
  const model::GptConfig& k = m.config;
  RETURN_IF_ERROR(SameValue("vocab_size", k.vocab_size, c.vocab_size));
  RETURN_IF_ERROR(SameValue("context", k.context, c.context));
  RETURN_IF_ERROR(SameValue("n_layer", k.n_layer, c.n_layer));
  RETURN_IF_ERROR(SameValue("n_head", k.n_head, c.n_head));
  RETURN_IF_ERROR(SameValue("n_embd", k.n_embd, c.n_embd));
  if (job.batch_size <= 0) return absl::OkStatus();
  const DataPosition& d = m.data;
  if (d.batch_size != job.batch_size || d.seq_len != job.seq_len) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint of step ", m.step, " was trained with batch=", d.batch_size,
                     " seq_len=", d.seq_len, " but the job has batch=", job.batch_size,
                     " seq_len=", job.seq_len, ": the data would not go on where it stopped (",
                     d.consumed_sequences, " sequences consumed); resume with batch=", d.batch_size,
                     " seq_len=", d.seq_len, " (any layout), or start from its weights"));
  }
  if (d.consumed_sequences != m.step * d.batch_size) {
    return absl::DataLossError(absl::StrCat("checkpoint of step ", m.step, " says ",
                                            d.consumed_sequences,
                                            " sequences were consumed, "
                                            "not step * batch = ",
                                            m.step * d.batch_size));
  }
  return absl::OkStatus();
}

// What this rank loads into one host array: the elements of `tensor` at `runs` (stored index =
// index in `values`), `want` of them.
struct Need {
  bool moments = false;  // from optimizer files into values (exp_avg) and values_sq
  std::string tensor;
  std::vector<ShardRun> runs;
  absl::Span<float> values, values_sq;  // moments: exp_avg and exp_avg_sq
  int64_t want = 0, got = 0;
};

}  // namespace

absl::StatusOr<std::vector<PendingFile>> SnapshotShard(int64_t step, const ShardIdentity& id,
                                                       absl::Span<model::GptStage* const> chunks,
                                                       absl::Span<model::AdamW* const> optimizers) {
  RETURN_IF_ERROR(CheckChunks(id, chunks, optimizers, /*optional_optimizers=*/false));
  const model::TensorParallelSpec tp{id.tp_rank, id.tp};
  std::vector<PendingFile> files;
  for (size_t j = 0; j < chunks.size(); ++j) {
    GptStage& stage = *chunks[j];
    const ParameterLayout& layout = stage.layout();
    if (id.dp_rank == 0) {
      ShardFile f = ChunkFile(ShardFileKind::kModel, id, static_cast<int>(j), stage.stage());
      std::vector<model::TensorToWrite> tensors;  // spans of device memory
      for (const ParameterTensor& t : layout.tensors()) {
        if (!StoresTensor(t, stage.stage(), id)) continue;
        f.tensors.push_back(LocalPiece(t, tp, 0, t.local_size()));
        tensors.push_back({t.name, StoredShape(f.tensors.back()),
                           absl::MakeConstSpan(stage.params() + t.offset, t.local_size())});
      }
      ASSIGN_OR_RETURN(PendingFile file, Pending(f, step, tensors, stage.backend()));
      files.push_back(std::move(file));
    }
    if (!id.zero1 && id.dp_rank != 0) continue;
    // The moments of [lo, hi) of the chunk's buffer: each tensor's piece of that range.
    model::AdamW& opt = *optimizers[j];
    const int64_t lo = opt.range_begin(), hi = opt.range_end();
    ShardFile f = ChunkFile(ShardFileKind::kOptimizer, id, static_cast<int>(j), stage.stage());
    f.adam_step = opt.step();
    const float* m = opt.exp_avg().data();  // device memory, [lo, hi) of the chunk's buffer
    const float* v = opt.exp_avg_sq().data();
    std::vector<model::TensorToWrite> tensors;
    for (const ParameterTensor& t : layout.tensors()) {
      const int64_t begin = std::max(lo, t.offset);
      const int64_t end = std::min(hi, t.offset + t.local_size());
      if (begin >= end || !StoresTensor(t, stage.stage(), id)) continue;
      f.tensors.push_back(LocalPiece(t, tp, begin - t.offset, end - t.offset));
      const std::vector<int64_t> shape = StoredShape(f.tensors.back());
      tensors.push_back(
          {"exp_avg." + t.name, shape, absl::MakeConstSpan(m + (begin - lo), end - begin)});
      tensors.push_back(
          {"exp_avg_sq." + t.name, shape, absl::MakeConstSpan(v + (begin - lo), end - begin)});
    }
    ASSIGN_OR_RETURN(PendingFile file, Pending(f, step, tensors, stage.backend()));
    files.push_back(std::move(file));
  }
  return files;
}

absl::Status SealStep(const std::string& dir, int64_t step, const model::GptConfig& config,
                      const CheckpointLayout& layout, const DataPosition& data,
                      std::vector<ShardFileEntry> entries) {
  ASSIGN_OR_RETURN(const model::HeldDirectory held, model::HeldDirectory::Open(dir));
  return SealStep(held, step, config, layout, data, std::move(entries));
}

absl::Status SealStep(const model::HeldDirectory& dir, int64_t step, const model::GptConfig& config,
                      const CheckpointLayout& layout, const DataPosition& data,
                      std::vector<ShardFileEntry> entries) {
  RETURN_IF_ERROR(model::Validate(config));
  const std::string step_dir = dir.PathOf(StepDirName(step));
  Manifest manifest;
  manifest.step = step;
  manifest.config = config;
  manifest.layout = layout;
  manifest.data = data;
  std::map<std::string, ShardFile> by_name;
  for (const ShardFileEntry& e : entries) {
    ASSIGN_OR_RETURN(ShardFile f,
                     FromEntry(e, manifest.checksum, absl::StrCat(step_dir, ": entry ", e.name())));
    const std::string name = f.FileName();
    if (!by_name.emplace(name, std::move(f)).second) {
      return absl::InvalidArgumentError(absl::StrCat(step_dir, ": two entries for ", name));
    }
  }
  // Each file of the layout once, and every element of every tensor and moment once.
  const StageSpec whole{0, config.n_layer, true, true};
  ASSIGN_OR_RETURN(const ParameterLayout full, ParameterLayout::Create(config, whole, {0, 1}));
  std::map<std::string, int64_t> stored[2];  // [model, optimizer]: tensor -> elements
  int64_t adam_step = -1;
  for (const ShardFile& want : ExpectedFiles(layout)) {
    auto it = by_name.find(want.FileName());
    if (it == by_name.end()) {
      return absl::FailedPreconditionError(absl::StrCat(step_dir, " is incomplete: no rank wrote ",
                                                        want.FileName(),
                                                        " (did every rank's save succeed?)"));
    }
    const ShardFile& f = it->second;
    const bool opt = f.kind == ShardFileKind::kOptimizer;
    if (opt && adam_step >= 0 && f.adam_step != adam_step) {
      return absl::FailedPreconditionError(
          absl::StrCat(step_dir, ": ", f.FileName(), " holds the moments after ", f.adam_step,
                       " AdamW steps, another file after ", adam_step));
    }
    if (opt) adam_step = f.adam_step;
    for (const TensorShard& t : f.tensors) stored[opt][t.tensor] += t.size();
    manifest.files.push_back(f);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(step_dir, ": ", by_name.begin()->first, " is not a file of the layout"));
  }
  for (const ParameterTensor& t : full.tensors()) {
    for (int opt = 0; opt < 2; ++opt) {
      if (stored[opt][t.name] != t.global_size()) {
        return absl::FailedPreconditionError(absl::StrCat(
            step_dir, " is incomplete: its ", opt ? "optimizer" : "model", " files hold ",
            stored[opt][t.name], " of the ", t.global_size(), " elements of ", t.name));
      }
    }
  }
  // The manifest seals the step; only then may `latest` name it.
  ASSIGN_OR_RETURN(const std::string json, ManifestToJson(manifest));
  ASSIGN_OR_RETURN(const model::HeldDirectory held_step, dir.OpenSubdirectory(StepDirName(step)));
  RETURN_IF_ERROR(held_step.WriteFileAtomically(kManifestFileName, json));
  return model::PointLatestAt(dir, step);
}

absl::Status SaveShard(const std::string& dir, int64_t step, const ShardIdentity& id,
                       absl::Span<model::GptStage* const> chunks,
                       absl::Span<model::AdamW* const> optimizers) {
  RETURN_IF_ERROR(CheckChunks(id, chunks, optimizers, /*optional_optimizers=*/false));
  ASSIGN_OR_RETURN(const std::string step_dir,
                   model::PrepareStepDirectory(dir, step, kManifestFileName));
  ASSIGN_OR_RETURN(std::vector<PendingFile> files, SnapshotShard(step, id, chunks, optimizers));
  for (const PendingFile& f : files) {
    RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(step_dir, "/", f.name), f.bytes));
  }
  return absl::OkStatus();
}

absl::Status WriteManifest(const std::string& dir, int64_t step, const CheckpointLayout& layout,
                           const model::GptConfig& config, const DataPosition& data) {
  const std::string step_dir = absl::StrCat(dir, "/", StepDirName(step));
  std::vector<ShardFileEntry> entries;
  for (const ShardFile& want : ExpectedFiles(layout)) {
    const std::string path = absl::StrCat(step_dir, "/", want.FileName());
    absl::StatusOr<std::string> bytes = ReadFileToString(path);
    if (absl::IsNotFound(bytes.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat(step_dir, " is incomplete: ", want.FileName(),
                       " is missing (did every rank's SaveShard succeed?)"));
    }
    RETURN_IF_ERROR(bytes.status());
    const int64_t size = static_cast<int64_t>(bytes->size());
    const uint64_t checksum = ShardChecksum(*bytes);
    absl::StatusOr<model::SafetensorsFile> file =
        model::SafetensorsFile::Parse(std::move(bytes).value(), path);
    if (!file.ok()) return absl::DataLossError(file.status().message());
    int64_t file_step = -1;
    ASSIGN_OR_RETURN(ShardFile got, ParseShardMetadata(file->metadata(), &file_step, path));
    if (file_step != step || got.FileName() != want.FileName()) {
      return absl::DataLossError(absl::StrCat(path, ": holds step ", file_step, " of ",
                                              got.FileName(), ", expected step ", step));
    }
    got.bytes = size;
    got.checksum = checksum;
    entries.push_back(ToEntry(got, ChecksumKind::kXxh3_64));
  }
  return SealStep(dir, step, config, layout, data, std::move(entries));
}

absl::StatusOr<int64_t> LoadShard(const std::string& path, const ShardIdentity& id,
                                  absl::Span<model::GptStage* const> chunks,
                                  absl::Span<model::AdamW* const> optimizers,
                                  const DataPosition& job) {
  RETURN_IF_ERROR(CheckChunks(id, chunks, optimizers, /*optional_optimizers=*/true));
  std::string step_dir;
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(path, &step_dir));
  RETURN_IF_ERROR(CheckCompatible(m, chunks[0]->config(), job));
  const std::string manifest_path = absl::StrCat(step_dir, "/", kManifestFileName);

  // Host copies of what this rank holds, and what each of its tensors needs from the step.
  const model::TensorParallelSpec tp{id.tp_rank, id.tp};
  const size_t n = chunks.size();
  std::vector<std::vector<float>> params(n), m1(n), m2(n);
  std::vector<Need> needs;  // params first, then moments; spans into the vectors above
  for (size_t j = 0; j < n; ++j) {
    const ParameterLayout& layout = chunks[j]->layout();
    params[j].resize(layout.total_size());
    const model::AdamW* opt = optimizers.empty() ? nullptr : optimizers[j];
    const int64_t lo = opt ? opt->range_begin() : 0, hi = opt ? opt->range_end() : 0;
    m1[j].resize(hi - lo);
    m2[j].resize(hi - lo);
    for (const ParameterTensor& t : layout.tensors()) {
      ASSIGN_OR_RETURN(std::vector<ShardRun> runs,
                       ShardRuns(LocalPiece(t, tp, 0, t.local_size()), "this rank"));
      needs.push_back({false,
                       t.name,
                       std::move(runs),
                       absl::MakeSpan(params[j]).subspan(t.offset, t.local_size()),
                       {},
                       t.local_size()});
      const int64_t begin = std::max(lo, t.offset);
      const int64_t end = std::min(hi, t.offset + t.local_size());
      if (begin >= end) continue;
      ASSIGN_OR_RETURN(runs,
                       ShardRuns(LocalPiece(t, tp, begin - t.offset, end - t.offset), "this rank"));
      needs.push_back({true, t.name, std::move(runs),
                       absl::MakeSpan(m1[j]).subspan(begin - lo, end - begin),
                       absl::MakeSpan(m2[j]).subspan(begin - lo, end - begin), end - begin});
    }
  }
  // tensor -> needs, for model files ([0]) and optimizer files ([1]).
  std::map<std::string, std::vector<Need*>> by_tensor[2];
  for (Need& need : needs) by_tensor[need.moments][need.tensor].push_back(&need);

  int64_t adam_step = -1;
  for (const ShardFile& f : m.files) {
    const int opt = f.kind == ShardFileKind::kOptimizer;
    if (opt) adam_step = f.adam_step;
    // Stored array name -> its description and whether it is exp_avg_sq.
    std::map<std::string, std::pair<const TensorShard*, bool>> arrays;
    for (const TensorShard& t : f.tensors) {
      if (by_tensor[opt].count(t.tensor) == 0) continue;
      if (opt) {
        arrays["exp_avg." + t.tensor] = {&t, false};
        arrays["exp_avg_sq." + t.tensor] = {&t, true};
      } else {
        arrays[t.tensor] = {&t, false};
      }
    }
    if (arrays.empty()) continue;
    const std::string file_path = absl::StrCat(step_dir, "/", f.FileName());
    RETURN_IF_ERROR(ReadVerifiedArrays(
        step_dir, f, m.checksum, [&](const std::string& name) { return arrays.count(name) > 0; },
        [&](const model::TensorInfo& info, absl::Span<const float> values) -> absl::Status {
          const auto& [t, second_moment] = arrays.at(info.name);
          if (info.shape != StoredShape(*t)) {
            return absl::DataLossError(absl::StrCat(file_path, ": ", info.name,
                                                    " does not have the shape its entry says"));
          }
          ASSIGN_OR_RETURN(std::vector<ShardRun> runs, ShardRuns(*t, file_path));
          for (Need* need : by_tensor[opt].at(t->tensor)) {
            const int64_t n = CopyOverlap(runs, values, need->runs,
                                          second_moment ? need->values_sq : need->values);
            if (!second_moment) need->got += n;
          }
          return absl::OkStatus();
        }));
  }
  for (const Need& need : needs) {
    if (need.got != need.want) {
      return absl::DataLossError(absl::StrCat(
          manifest_path, ": the step holds ", need.got, " of the ", need.want, " elements of ",
          need.tensor, need.moments ? "'s AdamW moments" : "", " that dp_rank ", id.dp_rank,
          " pp_rank ", id.pp_rank, " tp_rank ", id.tp_rank, " needs"));
    }
  }
  if (!optimizers.empty() && adam_step < 0) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": no optimizer file"));
  }
  // Everything read: only now is the rank's state replaced.
  for (size_t j = 0; j < n; ++j) {
    GptStage& stage = *chunks[j];
    RETURN_IF_ERROR(ToDevice(stage.backend(), stage.params(), params[j]));
    if (optimizers.empty()) continue;
    model::AdamW& opt = *optimizers[j];
    RETURN_IF_ERROR(ToDevice(stage.backend(), opt.exp_avg().data(), m1[j]));
    RETURN_IF_ERROR(ToDevice(stage.backend(), opt.exp_avg_sq().data(), m2[j]));
    opt.set_step(adam_step);
  }
  return m.step;
}

}  // namespace dtrain::parallel
