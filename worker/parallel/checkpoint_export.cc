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
  // The output: the whole model laid out as one worker holding it (tp 1) lays it out, which is
  // the tensor order model::SaveTensors writes.
  const StageSpec whole{0, m.config.n_layer, true, true};
  absl::StatusOr<ParameterLayout> full = ParameterLayout::Create(m.config, whole, {0, 1});
  if (!full.ok()) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": ", full.status().message()));
  }
  struct Target {
    const ParameterTensor* tensor;
    std::vector<ShardRun> runs;  // the whole tensor
    int64_t got = 0;
  };
  std::map<std::string, Target> targets;
  for (const ParameterTensor& t : full->tensors()) {
    ASSIGN_OR_RETURN(
        std::vector<ShardRun> runs,
        ShardRuns({t.name, t.global_shape, model::ShardBoxes(t, {0, 1}), 0, t.global_size()},
                  "export"));
    targets[t.name] = {&t, std::move(runs)};
  }
  std::vector<float> host(full->total_size());
  for (const ShardFile& f : m.files) {
    if (f.kind != ShardFileKind::kModel || f.tensors.empty()) continue;
    const std::string file_path = absl::StrCat(step_dir, "/", f.FileName());
    std::map<std::string, const TensorShard*> arrays;
    for (const TensorShard& t : f.tensors) {
      if (targets.count(t.tensor) == 0) {
        return absl::DataLossError(
            absl::StrCat(file_path, ": ", t.tensor, " is not a tensor of the model"));
      }
      arrays[t.tensor] = &t;
    }
    RETURN_IF_ERROR(ReadVerifiedArrays(
        step_dir, f, m.checksum, [&](const std::string& name) { return arrays.count(name) > 0; },
        [&](const model::TensorInfo& info, absl::Span<const float> values) -> absl::Status {
          const TensorShard& t = *arrays.at(info.name);
          if (info.shape != StoredShape(t)) {
            return absl::DataLossError(absl::StrCat(file_path, ": ", info.name,
                                                    " does not have the shape its entry says"));
          }
          Target& target = targets.at(t.tensor);
          ASSIGN_OR_RETURN(std::vector<ShardRun> runs, ShardRuns(t, file_path));
          target.got += CopyOverlap(
              runs, values, target.runs,
              absl::MakeSpan(host).subspan(target.tensor->offset, target.tensor->global_size()));
          return absl::OkStatus();
        }));
  }
  std::vector<model::TensorToWrite> tensors;
  for (const ParameterTensor& g : full->tensors()) {
    if (targets[g.name].got != g.global_size()) {
      return absl::DataLossError(absl::StrCat(manifest_path, ": the model files hold ",
                                              targets[g.name].got, " of the ", g.global_size(),
                                              " elements of ", g.name));
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
