// ExportSafetensors: the whole model of a complete step as one GPT-2 safetensors file,
// identical to what one worker holding the whole model saves.
#include "worker/parallel/checkpoint_export.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/parameter_layout.h"
#include "worker/model/safetensors.h"
#include "worker/parallel/manifest.h"

namespace dtrain::parallel {

using model::ParameterLayout;
using model::ParameterTensor;
using model::StageSpec;

absl::StatusOr<model::CheckpointStep> ExportSafetensors(const std::string& path,
                                                        const std::string& out_path) {
  std::string step_dir;
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(path, &step_dir));
  const std::string manifest_path = absl::StrCat(step_dir, "/", kManifestFileName);
  const int tp = m.layout.tp;
  // The output: the whole model laid out as one worker holding it (tp 1) lays it out, which is
  // the tensor order model::SaveTensors writes.
  const StageSpec whole{0, m.config.n_layer, true, true};
  absl::StatusOr<ParameterLayout> full = ParameterLayout::Create(m.config, whole, {0, 1});
  if (!full.ok()) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": ", full.status().message()));
  }
  std::map<std::string, int> index;  // tensor name -> position in full->tensors()
  for (size_t i = 0; i < full->tensors().size(); ++i) index[full->tensors()[i].name] = i;
  std::vector<float> host(full->total_size());
  // placed[i][r]: tp rank r's shard of tensor i is in `host` (replicated tensors: rank 0 only).
  std::vector<std::vector<bool>> placed(full->tensors().size(), std::vector<bool>(tp, false));

  for (const ShardFile& f : m.files) {
    if (f.kind != ShardFileKind::kModel) continue;
    const model::TensorParallelSpec spec{f.tp_rank, tp};
    absl::StatusOr<ParameterLayout> chunk = ParameterLayout::Create(m.config, f.stage, spec);
    if (!chunk.ok()) {
      return absl::DataLossError(
          absl::StrCat(manifest_path, ": ", f.FileName(), ": ", chunk.status().message()));
    }
    ASSIGN_OR_RETURN(model::SafetensorsFile file, OpenVerified(step_dir, f, m.checksum));
    std::vector<float> local;
    for (const ParameterTensor& t : chunk->tensors()) {
      // The head's tied copy of wte equals the embedding stage's; the model has one wte.
      if (t.name == "wte.weight" && !f.stage.has_embedding) continue;
      // Replicated tensors are the same on every tp rank: take rank 0's.
      const bool sharded = t.shard != model::ShardKind::kReplicated;
      if (!sharded && f.tp_rank != 0) continue;
      auto it = index.find(t.name);
      if (it == index.end()) return absl::InternalError(absl::StrCat("no tensor ", t.name));
      const int i = it->second;
      const ParameterTensor& g = full->tensors()[i];
      if (placed[i][f.tp_rank]) {
        return absl::DataLossError(absl::StrCat(manifest_path, ": ", t.name, " of tp_rank ",
                                                f.tp_rank, " is in two chunks"));
      }
      local.resize(t.local_size());
      RETURN_IF_ERROR(ReadShardTensor(file, t.name, t.local_shape, absl::MakeSpan(local)));
      RETURN_IF_ERROR(model::InsertShard(t, spec, local,
                                         absl::MakeSpan(host.data() + g.offset, g.global_size())));
      if (sharded) {
        placed[i][f.tp_rank] = true;
      } else {
        placed[i].assign(tp, true);
      }
    }
  }
  std::vector<model::TensorToWrite> tensors;
  for (size_t i = 0; i < full->tensors().size(); ++i) {
    const ParameterTensor& g = full->tensors()[i];
    for (int r = 0; r < tp; ++r) {
      if (!placed[i][r]) {
        return absl::DataLossError(absl::StrCat(manifest_path, ": no chunk holds ", g.name,
                                                tp > 1 ? absl::StrCat(" of tp_rank ", r) : ""));
      }
    }
    tensors.push_back(
        {g.name, g.global_shape, absl::MakeConstSpan(host.data() + g.offset, g.global_size())});
  }
  RETURN_IF_ERROR(model::WriteSafetensors(out_path, tensors, {{"step", absl::StrCat(m.step)}}));
  return model::CheckpointStep{step_dir, m.step};
}

std::string ExportSummary(const model::CheckpointStep& exported, const std::string& out_path) {
  const std::string& dir = exported.step_dir;
  return absl::StrCat("exported step ", exported.step, " of ", dir.substr(0, dir.rfind('/')),
                      " to ", out_path);
}

}  // namespace dtrain::parallel
