#include "worker/parallel/sharded_checkpoint.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "common/files.h"
#include "worker/model/safetensors.h"

namespace dtrain::parallel {
namespace {

using model::GptStage;
using model::ParameterLayout;
using model::ParameterTensor;
using model::StageSpec;

std::string StageString(const StageSpec& s) {
  return absl::StrCat("layers [", s.first_layer, ", ", s.first_layer + s.num_layers, ")",
                      s.has_embedding ? " + embedding" : "", s.has_head ? " + head" : "");
}

bool SameStage(const StageSpec& a, const StageSpec& b) {
  return a.first_layer == b.first_layer && a.num_layers == b.num_layers &&
         a.has_embedding == b.has_embedding && a.has_head == b.has_head;
}

absl::Status CheckIdentity(const ShardIdentity& id) {
  if (id.dp < 1 || id.pp < 1 || id.tp < 1 || id.virtual_stages < 1 || id.dp_rank < 0 ||
      id.dp_rank >= id.dp || id.pp_rank < 0 || id.pp_rank >= id.pp || id.tp_rank < 0 ||
      id.tp_rank >= id.tp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid shard identity: dp_rank=", id.dp_rank, " pp_rank=", id.pp_rank,
        " tp_rank=", id.tp_rank, " of dp=", id.dp, " pp=", id.pp, " tp=", id.tp,
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
    return absl::InvalidArgumentError(absl::StrCat(chunks.size(), " chunks for virtual_stages=",
                                                   id.virtual_stages));
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
                                                     tp.size, " but the identity says ",
                                                     id.tp_rank, " of ", id.tp));
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

ShardFile ModelFile(const ShardIdentity& id, int chunk, const StageSpec& stage) {
  ShardFile f;
  f.kind = ShardFileKind::kModel;
  f.pp_rank = id.pp_rank;
  f.tp_rank = id.tp_rank;
  f.chunk = chunk;
  f.stage = stage;
  return f;
}

ShardFile OptimizerFile(const ShardIdentity& id, int chunk, const GptStage& stage,
                        const model::AdamW& opt) {
  ShardFile f = ModelFile(id, chunk, stage.stage());
  f.kind = ShardFileKind::kOptimizer;
  f.dp_rank = id.zero1 ? id.dp_rank : 0;
  f.range_begin = opt.range_begin();
  f.range_end = opt.range_end();
  f.buffer_size = stage.layout().total_size();
  f.adam_step = opt.step();
  return f;
}

absl::StatusOr<std::vector<float>> ToHost(kernels::Backend* backend, const float* device,
                                          int64_t n) {
  std::vector<float> host(n);
  if (n > 0) RETURN_IF_ERROR(backend->CopyToHost(host.data(), device, n * sizeof(float)));
  return host;
}

absl::Status ToDevice(kernels::Backend* backend, float* device, const std::vector<float>& host) {
  if (host.empty()) return absl::OkStatus();
  return backend->CopyToDevice(device, host.data(), host.size() * sizeof(float));
}

template <typename T>
std::string Show(T value) {
  return absl::StrCat(value);
}
std::string Show(bool value) { return value ? "true" : "false"; }

template <typename T>
absl::Status SameValue(absl::string_view field, T checkpoint, T job) {
  if (checkpoint == job) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("checkpoint has ", field, "=",
                                                    Show(checkpoint), " but the job has ", field,
                                                    "=", Show(job)));
}

absl::Status CheckCompatible(const Manifest& m, const ShardIdentity& id,
                             const model::GptConfig& c) {
  const model::GptConfig& k = m.config;
  RETURN_IF_ERROR(SameValue("vocab_size", k.vocab_size, c.vocab_size));
  RETURN_IF_ERROR(SameValue("context", k.context, c.context));
  RETURN_IF_ERROR(SameValue("n_layer", k.n_layer, c.n_layer));
  RETURN_IF_ERROR(SameValue("n_head", k.n_head, c.n_head));
  RETURN_IF_ERROR(SameValue("n_embd", k.n_embd, c.n_embd));
  RETURN_IF_ERROR(SameValue("dp", m.layout.dp, id.dp));
  RETURN_IF_ERROR(SameValue("pp", m.layout.pp, id.pp));
  RETURN_IF_ERROR(SameValue("tp", m.layout.tp, id.tp));
  RETURN_IF_ERROR(SameValue("virtual_stages", m.layout.virtual_stages, id.virtual_stages));
  return SameValue("zero1", m.layout.zero1, id.zero1);
}

}  // namespace

absl::Status SaveShard(const std::string& dir, int64_t step, const ShardIdentity& id,
                       absl::Span<model::GptStage* const> chunks,
                       absl::Span<model::AdamW* const> optimizers) {
  RETURN_IF_ERROR(CheckChunks(id, chunks, optimizers, /*optional_optimizers=*/false));
  ASSIGN_OR_RETURN(const std::string step_dir,
                   model::PrepareStepDirectory(dir, step, kManifestFileName));
  const bool writes_optimizer = id.zero1 || id.dp_rank == 0;
  for (size_t j = 0; j < chunks.size(); ++j) {
    GptStage& stage = *chunks[j];
    const ParameterLayout& layout = stage.layout();
    if (id.dp_rank == 0) {
      const ShardFile f = ModelFile(id, static_cast<int>(j), stage.stage());
      ASSIGN_OR_RETURN(std::vector<float> host,
                       ToHost(stage.backend(), stage.params(), layout.total_size()));
      std::vector<model::TensorToWrite> tensors;
      for (const ParameterTensor& t : layout.tensors()) {
        tensors.push_back({t.name, t.local_shape,
                           absl::MakeConstSpan(host.data() + t.offset, t.local_size())});
      }
      RETURN_IF_ERROR(model::WriteSafetensors(absl::StrCat(step_dir, "/", f.FileName()), tensors,
                                              ShardMetadata(f, step)));
    }
    if (writes_optimizer) {
      model::AdamW& opt = *optimizers[j];
      const ShardFile f = OptimizerFile(id, static_cast<int>(j), stage, opt);
      const int64_t n = opt.range_end() - opt.range_begin();
      ASSIGN_OR_RETURN(std::vector<float> m, ToHost(stage.backend(), opt.exp_avg().data(), n));
      ASSIGN_OR_RETURN(std::vector<float> v, ToHost(stage.backend(), opt.exp_avg_sq().data(), n));
      const std::vector<model::TensorToWrite> tensors = {{"exp_avg", {n}, m},
                                                         {"exp_avg_sq", {n}, v}};
      RETURN_IF_ERROR(model::WriteSafetensors(absl::StrCat(step_dir, "/", f.FileName()), tensors,
                                              ShardMetadata(f, step)));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteManifest(const std::string& dir, int64_t step, const ShardIdentity& id,
                           const model::GptConfig& config) {
  RETURN_IF_ERROR(CheckIdentity(id));
  RETURN_IF_ERROR(model::Validate(config));
  const std::string step_dir = absl::StrCat(dir, "/", StepDirName(step));
  Manifest manifest;
  manifest.step = step;
  manifest.config = config;
  manifest.layout = id.layout();
  for (const ShardFile& want : ExpectedFiles(manifest.layout)) {
    const std::string path = absl::StrCat(step_dir, "/", want.FileName());
    absl::StatusOr<std::string> bytes = ReadFileToString(path);
    if (absl::IsNotFound(bytes.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat(step_dir, " is incomplete: ", want.FileName(),
                       " is missing (did every rank's SaveShard succeed?)"));
    }
    RETURN_IF_ERROR(bytes.status());
    const int64_t size = static_cast<int64_t>(bytes->size());
    const uint64_t checksum = ShardChecksum(*bytes, manifest.checksum);
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
    manifest.files.push_back(got);
  }
  // The manifest seals the step; only then may `latest` name it.
  ASSIGN_OR_RETURN(const std::string json, ManifestToJson(manifest));
  RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(step_dir, "/", kManifestFileName), json));
  return model::PointLatestAt(dir, step);
}

absl::StatusOr<int64_t> LoadShard(const std::string& path, const ShardIdentity& id,
                                  absl::Span<model::GptStage* const> chunks,
                                  absl::Span<model::AdamW* const> optimizers) {
  RETURN_IF_ERROR(CheckChunks(id, chunks, optimizers, /*optional_optimizers=*/true));
  std::string step_dir;
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(path, &step_dir));
  RETURN_IF_ERROR(CheckCompatible(m, id, chunks[0]->config()));

  // Check every chunk and range before changing anything, so a refused resume leaves the
  // chunks and optimizers as they were.
  std::vector<const ShardFile*> model_files, optimizer_files;
  for (size_t j = 0; j < chunks.size(); ++j) {
    const int c = static_cast<int>(j);
    const ShardFile* mf = m.Find(ShardFileKind::kModel, 0, id.pp_rank, id.tp_rank, c);
    if (!SameStage(mf->stage, chunks[j]->stage())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "chunk ", j, " of pp_rank ", id.pp_rank, ": checkpoint has ", StageString(mf->stage),
          " but the job has ", StageString(chunks[j]->stage())));
    }
    model_files.push_back(mf);
    if (optimizers.empty()) continue;
    const ShardFile* of =
        m.Find(ShardFileKind::kOptimizer, id.zero1 ? id.dp_rank : 0, id.pp_rank, id.tp_rank, c);
    const model::AdamW& opt = *optimizers[j];
    if (of->range_begin != opt.range_begin() || of->range_end != opt.range_end() ||
        of->buffer_size != chunks[j]->layout().total_size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "chunk ", j, ": checkpoint's optimizer state covers [", of->range_begin, ", ",
          of->range_end, ") of ", of->buffer_size, " parameters but the job's covers [",
          opt.range_begin(), ", ", opt.range_end(), ") of ",
          chunks[j]->layout().total_size()));
    }
    optimizer_files.push_back(of);
  }

  for (size_t j = 0; j < chunks.size(); ++j) {
    GptStage& stage = *chunks[j];
    const ParameterLayout& layout = stage.layout();
    ASSIGN_OR_RETURN(model::SafetensorsFile file, OpenVerified(step_dir, *model_files[j], m.checksum));
    std::vector<float> host(layout.total_size());
    for (const ParameterTensor& t : layout.tensors()) {
      RETURN_IF_ERROR(ReadShardTensor(file, t.name, t.local_shape,
                                      absl::MakeSpan(host.data() + t.offset, t.local_size())));
    }
    RETURN_IF_ERROR(ToDevice(stage.backend(), stage.params(), host));
    if (optimizers.empty()) continue;
    model::AdamW& opt = *optimizers[j];
    const int64_t n = opt.range_end() - opt.range_begin();
    ASSIGN_OR_RETURN(model::SafetensorsFile ofile, OpenVerified(step_dir, *optimizer_files[j], m.checksum));
    std::vector<float> moments(n);
    RETURN_IF_ERROR(ReadShardTensor(ofile, "exp_avg", {n}, absl::MakeSpan(moments)));
    RETURN_IF_ERROR(ToDevice(stage.backend(), opt.exp_avg().data(), moments));
    RETURN_IF_ERROR(ReadShardTensor(ofile, "exp_avg_sq", {n}, absl::MakeSpan(moments)));
    RETURN_IF_ERROR(ToDevice(stage.backend(), opt.exp_avg_sq().data(), moments));
    opt.set_step(optimizer_files[j]->adam_step);
  }
  return m.step;
}

}  // namespace dtrain::parallel
