#include "worker/model/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "proto/checkpoint.pb.h"
#include "worker/model/safetensors.h"

namespace dtrain::model {
namespace {

constexpr char kOptimizerFormat[] = "dtrain-adamw-v1";
constexpr char kModelFileName[] = "model.safetensors";
constexpr char kOptimizerFileName[] = "optimizer.safetensors";  // written last: seals a step
constexpr char kManifestFileName[] = "manifest.json";           // seals a sharded step

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The directories directly under `dir` whose names `want` accepts, sorted.
std::vector<std::string> SubdirectoriesIn(const std::string& dir,
                                          bool (*want)(absl::string_view name)) {
  std::vector<std::string> found;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (want(e->d_name) && IsDirectory(absl::StrCat(dir, "/", e->d_name))) {
        found.push_back(e->d_name);
      }
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The step of a step directory: from its name when it is step_<digits>, else from its files
// (a one-worker step's model.safetensors metadata, a sharded step's manifest).
absl::StatusOr<int64_t> StepOfDirectory(const std::string& step_dir);

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

absl::StatusOr<std::string> PrepareStepDirectory(const std::string& dir, int64_t step,
                                                 absl::string_view seal_file) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("negative step ", step));
  const std::string step_dir = AbsolutePath(absl::StrCat(dir, "/", StepDirName(step)));
  // A sealed step is never written again: loading a checkpoint must not unseal it, and another
  // writer's finished step is not ours to replace.
  if (Exists(absl::StrCat(step_dir, "/", seal_file))) {
    return absl::FailedPreconditionError(
        absl::StrCat("will not overwrite ", step_dir, ": it is a sealed checkpoint (it has ",
                     seal_file, "; a finished checkpoint is never rewritten)"));
  }
  RETURN_IF_ERROR(MakeDirectories(step_dir));
  return step_dir;
}

absl::Status PointLatestAt(const std::string& dir, int64_t step) {
  return WriteFileAtomically(absl::StrCat(dir, "/", kLatestFileName), StepDirName(step) + "\n");
}

absl::StatusOr<int64_t> LoadTrainingState(const std::string& path, GptStage& stage,
                                          AdamW& optimizer) {
  ASSIGN_OR_RETURN(const CheckpointStep checkpoint, ResolveCheckpoint(path));
  const std::string& step_dir = checkpoint.step_dir;
  if (!Exists(absl::StrCat(step_dir, "/", kModelFileName)) &&
      Exists(absl::StrCat(step_dir, "/", kManifestFileName))) {
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

namespace {

absl::StatusOr<int64_t> StepOfDirectory(const std::string& step_dir) {
  absl::string_view name = step_dir;
  name = name.substr(name.rfind('/') + 1);
  int64_t step = 0;
  if (absl::ConsumePrefix(&name, "step_") && absl::SimpleAtoi(name, &step) && step >= 0) {
    return step;
  }
  const std::string manifest = absl::StrCat(step_dir, "/", kManifestFileName);
  if (Exists(manifest)) {
    // Only the step: worker/parallel/manifest.h reads and checks the rest when it loads.
    ASSIGN_OR_RETURN(std::string json, ReadFileToString(manifest));
    CheckpointManifest proto;
    const auto parsed = google::protobuf::util::JsonStringToMessage(json, &proto);
    if (!parsed.ok() || proto.step() < 0) {
      return absl::DataLossError(absl::StrCat(manifest, " has no valid \"step\": ",
                                              std::string(parsed.message())));
    }
    return proto.step();
  }
  ASSIGN_OR_RETURN(SafetensorsFile model,
                   SafetensorsFile::Open(absl::StrCat(step_dir, "/", kModelFileName)));
  return StepOf(model);
}

}  // namespace

absl::StatusOr<CheckpointStep> ResolveCheckpoint(const std::string& path) {
  const std::string dir = AbsolutePath(path);
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint ", dir, Exists(dir) ? " is not a directory" : " does not exist"));
  }
  CheckpointStep out;
  out.step_dir = dir;
  const std::string latest = absl::StrCat(dir, "/", kLatestFileName);
  if (Exists(latest)) {
    ASSIGN_OR_RETURN(std::string name, ReadFileToString(latest));
    name = std::string(absl::StripAsciiWhitespace(name));
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return absl::DataLossError(absl::StrCat(latest, " does not name a step directory"));
    }
    out.step_dir = absl::StrCat(dir, "/", name);
    if (!IsDirectory(out.step_dir)) {
      return absl::DataLossError(
          absl::StrCat(latest, " names ", name, ", which is not a directory in ", dir));
    }
  } else if (!Exists(absl::StrCat(dir, "/", kModelFileName)) &&
             !Exists(absl::StrCat(dir, "/", kManifestFileName)) &&
             !absl::StartsWith(dir.substr(dir.rfind('/') + 1), "step_")) {
    // Not a step directory (those are accepted as they are: the loaders say what is missing).
    const std::vector<std::string> jobs = SubdirectoriesIn(dir, IsJobId);
    if (!jobs.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, " holds the directories of jobs ", absl::StrJoin(jobs, ", "),
          " but no checkpoint of its own: name one of them (", dir, "/", jobs.back(),
          "), or the job id"));
    }
    const std::vector<std::string> steps = SubdirectoriesIn(dir, [](absl::string_view name) {
      return absl::StartsWith(name, "step_");
    });
    if (!steps.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, " has no sealed checkpoint: no ", kLatestFileName, ", and its steps (",
          absl::StrJoin(steps, ", "), ") were never sealed (a save that did not finish leaves a "
          "step without ", kManifestFileName, " or ", kOptimizerFileName, ")"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is not a checkpoint: it has no ", kLatestFileName, ", ",
                     kModelFileName, " or ", kManifestFileName));
  }
  ASSIGN_OR_RETURN(out.step, StepOfDirectory(out.step_dir));
  return out;
}

absl::Status CheckStepsBeyond(int64_t steps, const CheckpointStep& checkpoint) {
  if (steps > checkpoint.step) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "steps=", steps, " is not beyond step ", checkpoint.step, " of the checkpoint ",
      checkpoint.step_dir, " (resume_from): there is nothing to train; set steps above ",
      checkpoint.step));
}

}  // namespace dtrain::model
