#include "worker/model/checkpoint.h"

#include <sys/stat.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/safetensors.h"

namespace dtrain::model {
namespace {

constexpr char kOptimizerFormat[] = "dtrain-adamw-v1";

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

absl::StatusOr<std::vector<float>> DeviceToHost(GptStage& stage, const float* values) {
  std::vector<float> host(stage.layout().total_size());
  RETURN_IF_ERROR(
      stage.backend()->CopyToHost(host.data(), values, host.size() * sizeof(float)));
  return host;
}

// Reads every tensor of the layout, named prefix + name, into `device` (laid out like params).
absl::Status ReadLayout(const SafetensorsFile& file, GptStage& stage, const std::string& prefix,
                        float* device) {
  const ParameterLayout& layout = stage.layout();
  std::vector<float> host(layout.total_size());
  std::vector<float> whole;
  for (const ParameterTensor& t : layout.tensors()) {
    whole.resize(t.global_size());
    RETURN_IF_ERROR(file.ReadFloat32(prefix + t.name, t.global_shape, absl::MakeSpan(whole)));
    RETURN_IF_ERROR(ExtractShard(t, stage.tp(), whole,
                                 absl::MakeSpan(host.data() + t.offset, t.local_size())));
  }
  return stage.backend()->CopyToDevice(device, host.data(), host.size() * sizeof(float));
}

void AppendLayout(const ParameterLayout& layout, const std::string& prefix,
                  const std::vector<float>& host, std::vector<std::string>& names,
                  std::vector<TensorToWrite>& out) {
  for (const ParameterTensor& t : layout.tensors()) {
    names.push_back(prefix + t.name);
    out.push_back(TensorToWrite{names.back(), t.local_shape,
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
  return ReadLayout(file, stage, "", stage.params());
}

absl::Status SaveTensors(const std::string& path, GptStage& stage, const float* values,
                         const std::map<std::string, std::string>& metadata) {
  RETURN_IF_ERROR(RequireWholeTensors(stage, "saving"));
  ASSIGN_OR_RETURN(std::vector<float> host, DeviceToHost(stage, values));
  std::vector<std::string> names;
  std::vector<TensorToWrite> tensors;
  names.reserve(stage.layout().tensors().size());
  AppendLayout(stage.layout(), "", host, names, tensors);
  return WriteSafetensors(path, tensors, metadata);
}

absl::StatusOr<std::string> SaveTrainingState(const std::string& dir, GptStage& stage,
                                              AdamW& optimizer) {
  RETURN_IF_ERROR(RequireWholeTensors(stage, "a checkpoint"));
  ASSIGN_OR_RETURN(const std::string step_dir,
                   PrepareStepDirectory(dir, optimizer.step(), kOptimizerFileName));
  const std::map<std::string, std::string> meta = {{"step", absl::StrCat(optimizer.step())}};
  RETURN_IF_ERROR(SaveTensors(absl::StrCat(step_dir, "/", kModelFileName), stage, stage.params(),
                              meta));

  ASSIGN_OR_RETURN(std::vector<float> m, DeviceToHost(stage, optimizer.exp_avg().data()));
  ASSIGN_OR_RETURN(std::vector<float> v, DeviceToHost(stage, optimizer.exp_avg_sq().data()));
  std::vector<std::string> names;
  std::vector<TensorToWrite> tensors;
  names.reserve(2 * stage.layout().tensors().size());
  AppendLayout(stage.layout(), "exp_avg.", m, names, tensors);
  AppendLayout(stage.layout(), "exp_avg_sq.", v, names, tensors);
  std::map<std::string, std::string> opt_meta = meta;
  opt_meta["format"] = kOptimizerFormat;
  RETURN_IF_ERROR(
      WriteSafetensors(absl::StrCat(step_dir, "/", kOptimizerFileName), tensors, opt_meta));
  RETURN_IF_ERROR(PointLatestAt(dir, optimizer.step()));
  return step_dir;
}

absl::StatusOr<int64_t> LoadTrainingState(const std::string& path, GptStage& stage,
                                          AdamW& optimizer) {
  ASSIGN_OR_RETURN(const CheckpointStep checkpoint, ResolveCheckpoint(path));
  const std::string& step_dir = checkpoint.step_dir;
  if (!Exists(absl::StrCat(step_dir, "/", kModelFileName)) &&
      Exists(absl::StrCat(step_dir, "/", kShardedManifestFileName))) {
    return absl::FailedPreconditionError(absl::StrCat(
        step_dir, " is a sharded (multi-worker) checkpoint: resume it with the same layout, or "
        "export it (dtrain export) and start a one-worker job from the file with init"));
  }
  ASSIGN_OR_RETURN(SafetensorsFile model,
                   SafetensorsFile::Open(absl::StrCat(step_dir, "/", kModelFileName)));
  ASSIGN_OR_RETURN(SafetensorsFile opt,
                   SafetensorsFile::Open(absl::StrCat(step_dir, "/", kOptimizerFileName)));
  ASSIGN_OR_RETURN(int64_t model_step, StepOf(model));
  ASSIGN_OR_RETURN(int64_t opt_step, StepOf(opt));
  auto format = opt.metadata().find("format");
  if (format == opt.metadata().end() || format->second != kOptimizerFormat) {
    return absl::DataLossError(absl::StrCat(opt.path(), ": not a ", kOptimizerFormat, " file"));
  }
  if (model_step != opt_step || model_step != checkpoint.step) {
    return absl::DataLossError(absl::StrCat(step_dir, ": model is at step ", model_step,
                                            " and optimizer at step ", opt_step,
                                            "; the directory says step ", checkpoint.step));
  }
  RETURN_IF_ERROR(ReadLayout(model, stage, "", stage.params()));
  RETURN_IF_ERROR(ReadLayout(opt, stage, "exp_avg.", optimizer.exp_avg().data()));
  RETURN_IF_ERROR(ReadLayout(opt, stage, "exp_avg_sq.", optimizer.exp_avg_sq().data()));
  optimizer.set_step(model_step);
  return model_step;
}

}  // namespace dtrain::model
