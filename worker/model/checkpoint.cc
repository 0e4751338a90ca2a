#include "worker/model/checkpoint.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/safetensors.h"

namespace dtrain::model {
namespace {

absl::StatusOr<std::vector<float>> DeviceToHost(GptStage& stage, const float* values) {
  std::vector<float> host(stage.layout().total_size());
  RETURN_IF_ERROR(stage.backend()->CopyToHost(host.data(), values, host.size() * sizeof(float)));
  return host;
}

// Reads every tensor of the layout into `device` (laid out like params).
absl::Status ReadLayout(const SafetensorsFile& file, GptStage& stage, float* device) {
  const ParameterLayout& layout = stage.layout();
  std::vector<float> host(layout.total_size());
  std::vector<float> whole;
  for (const ParameterTensor& t : layout.tensors()) {
    whole.resize(t.global_size());
    RETURN_IF_ERROR(file.ReadFloat32(t.name, t.global_shape, absl::MakeSpan(whole)));
    RETURN_IF_ERROR(
        ExtractShard(t, stage.tp(), whole, absl::MakeSpan(host.data() + t.offset, t.local_size())));
  }
  return stage.backend()->CopyToDevice(device, host.data(), host.size() * sizeof(float));
}

void AppendLayout(const ParameterLayout& layout, const std::vector<float>& host,
                  std::vector<TensorToWrite>& out) {
  for (const ParameterTensor& t : layout.tensors()) {
    out.push_back(TensorToWrite{t.name, t.local_shape,
                                absl::MakeConstSpan(host.data() + t.offset, t.local_size())});
  }
}

absl::Status RequireWholeTensors(const GptStage& stage, absl::string_view what) {
  if (stage.tp().size != 1) {
    return absl::UnimplementedError(
        absl::StrCat(what, " of a tensor-parallel shard: save whole tensors from tp size 1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadWeights(const std::string& path, GptStage& stage) {
  ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  return ReadLayout(file, stage, stage.params());
}

absl::Status SaveTensors(const std::string& path, GptStage& stage, const float* values,
                         const std::map<std::string, std::string>& metadata) {
  RETURN_IF_ERROR(RequireWholeTensors(stage, "saving"));
  ASSIGN_OR_RETURN(std::vector<float> host, DeviceToHost(stage, values));
  std::vector<TensorToWrite> tensors;
  AppendLayout(stage.layout(), host, tensors);
  return WriteSafetensors(path, tensors, metadata);
}

}  // namespace dtrain::model
