#include "worker/model/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "worker/model/file_io.h"
#include "worker/model/safetensors.h"

namespace dtrain::model {
namespace {

constexpr char kOptimizerFormat[] = "dtrain-adamw-v1";

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

absl::Status MakeDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create directory ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WriteTextAtomically(const std::string& path, const std::string& text) {
  ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Create(path));
  RETURN_IF_ERROR(writer.Append(text + "\n"));
  return writer.Commit();
}

absl::StatusOr<int64_t> StepOf(const SafetensorsFile& file) {
  auto it = file.metadata().find("step");
  int64_t step = 0;
  if (it == file.metadata().end() || !absl::SimpleAtoi(it->second, &step) || step < 0) {
    return absl::DataLossError(
        absl::StrCat(file.path(), ": metadata has no valid \"step\"; not a dtrain checkpoint"));
  }
  return step;
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

absl::Status SaveTrainingState(const std::string& dir, GptStage& stage, AdamW& optimizer) {
  RETURN_IF_ERROR(RequireWholeTensors(stage, "a checkpoint"));
  const std::string step_name = absl::StrFormat("step_%08d", optimizer.step());
  const std::string step_dir = absl::StrCat(dir, "/", step_name);
  RETURN_IF_ERROR(MakeDir(dir));
  RETURN_IF_ERROR(MakeDir(step_dir));
  const std::map<std::string, std::string> meta = {{"step", absl::StrCat(optimizer.step())}};
  RETURN_IF_ERROR(SaveTensors(step_dir + "/model.safetensors", stage, stage.params(), meta));

  ASSIGN_OR_RETURN(std::vector<float> m, DeviceToHost(stage, optimizer.exp_avg().data()));
  ASSIGN_OR_RETURN(std::vector<float> v, DeviceToHost(stage, optimizer.exp_avg_sq().data()));
  std::vector<std::string> names;
  std::vector<TensorToWrite> tensors;
  names.reserve(2 * stage.layout().tensors().size());
  AppendLayout(stage.layout(), "exp_avg.", m, names, tensors);
  AppendLayout(stage.layout(), "exp_avg_sq.", v, names, tensors);
  std::map<std::string, std::string> opt_meta = meta;
  opt_meta["format"] = kOptimizerFormat;
  RETURN_IF_ERROR(WriteSafetensors(step_dir + "/optimizer.safetensors", tensors, opt_meta));
  return WriteTextAtomically(dir + "/latest", step_name);
}

absl::StatusOr<int64_t> LoadTrainingState(const std::string& path, GptStage& stage,
                                          AdamW& optimizer) {
  std::string step_dir = path;
  std::ifstream latest(path + "/latest");
  if (latest) {
    std::string name;
    std::getline(latest, name);
    name = std::string(absl::StripAsciiWhitespace(name));
    if (name.empty() || name.find('/') != std::string::npos) {
      return absl::DataLossError(absl::StrCat(path, "/latest does not name a step directory"));
    }
    step_dir = absl::StrCat(path, "/", name);
  }
  ASSIGN_OR_RETURN(SafetensorsFile model, SafetensorsFile::Open(step_dir + "/model.safetensors"));
  ASSIGN_OR_RETURN(SafetensorsFile opt,
                   SafetensorsFile::Open(step_dir + "/optimizer.safetensors"));
  ASSIGN_OR_RETURN(int64_t model_step, StepOf(model));
  ASSIGN_OR_RETURN(int64_t opt_step, StepOf(opt));
  auto format = opt.metadata().find("format");
  if (format == opt.metadata().end() || format->second != kOptimizerFormat) {
    return absl::DataLossError(absl::StrCat(opt.path(), ": not a ", kOptimizerFormat, " file"));
  }
  if (model_step != opt_step) {
    return absl::DataLossError(absl::StrCat(step_dir, ": model is at step ", model_step,
                                            " but optimizer at step ", opt_step));
  }
  RETURN_IF_ERROR(ReadLayout(model, stage, "", stage.params()));
  RETURN_IF_ERROR(ReadLayout(opt, stage, "exp_avg.", optimizer.exp_avg().data()));
  RETURN_IF_ERROR(ReadLayout(opt, stage, "exp_avg_sq.", optimizer.exp_avg_sq().data()));
  optimizer.set_step(model_step);
  return model_step;
}

}  // namespace dtrain::model
