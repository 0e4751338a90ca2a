#include "worker/model/checkpoint_dir.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <utility>
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

namespace dtrain::model {
namespace {

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

}  // namespace

absl::StatusOr<int64_t> StepOf(const SafetensorsFile& file) {
  auto it = file.metadata().find("step");
  int64_t step = 0;
  if (it == file.metadata().end() || !absl::SimpleAtoi(it->second, &step) || step < 0) {
    return absl::DataLossError(
        absl::StrCat(file.path(), ": metadata has no valid \"step\"; not a dtrain checkpoint"));
  }
  return step;
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

namespace {

absl::StatusOr<int64_t> StepOfDirectory(const std::string& step_dir) {
  absl::string_view name = step_dir;
  name = name.substr(name.rfind('/') + 1);
  int64_t step = 0;
  if (absl::ConsumePrefix(&name, "step_") && absl::SimpleAtoi(name, &step) && step >= 0) {
    return step;
  }
  const std::string manifest = absl::StrCat(step_dir, "/", kShardedManifestFileName);
  if (Exists(manifest)) {
    // Only the step: worker/parallel/manifest.h reads and checks the rest when it loads.
    ASSIGN_OR_RETURN(std::string json, ReadFileToString(manifest));
    CheckpointManifest proto;
    const auto parsed = google::protobuf::util::JsonStringToMessage(json, &proto);
    if (!parsed.ok() || proto.step() < 0) {
      return absl::DataLossError(
          absl::StrCat(manifest, " has no valid \"step\": ", std::string(parsed.message())));
    }
    return proto.step();
  }
  ASSIGN_OR_RETURN(SafetensorsFile model,
                   SafetensorsFile::Open(absl::StrCat(step_dir, "/", kModelFileName)));
  return StepOf(model);
}

// The sealed steps of job directory `dir`, newest first: step directories with a seal (a
// sharded step's manifest.json or one worker's optimizer.safetensors).
std::vector<std::pair<int64_t, std::string>> SealedSteps(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> sealed;
  for (const std::string& name : SubdirectoriesIn(
           dir, [](absl::string_view name) { return absl::StartsWith(name, "step_"); })) {
    absl::StatusOr<int64_t> step = StepOfDirectory(absl::StrCat(dir, "/", name));
    if (!step.ok()) continue;
    if (Exists(absl::StrCat(dir, "/", name, "/", kShardedManifestFileName)) ||
        Exists(absl::StrCat(dir, "/", name, "/", kOptimizerFileName))) {
      sealed.emplace_back(*step, name);
    }
  }
  std::sort(sealed.rbegin(), sealed.rend());
  return sealed;
}

// The newest intact sealed step of job directory `dir`, whose `latest` names `latest_name`
// (step `latest_step`): that one, unless it is damaged or missing, or a newer one that was
// sealed while `latest` had not moved yet (a seal cut short between its manifest and `latest`).
// The note says what was skipped or why `latest` was not followed.
absl::StatusOr<CheckpointStep> NewestIntactStep(const std::string& dir,
                                                const std::string& latest_name, int64_t latest_step,
                                                const StepCheck& check) {
  std::vector<std::pair<int64_t, std::string>> candidates = SealedSteps(dir);
  const bool latest_sealed =
      std::find(candidates.begin(), candidates.end(), std::make_pair(latest_step, latest_name)) !=
      candidates.end();
  if (!latest_sealed) {
    candidates.emplace_back(latest_step, latest_name);
    std::sort(candidates.rbegin(), candidates.rend());
  }
  std::vector<std::string> skipped, damaged;
  for (const auto& [step, name] : candidates) {
    const std::string step_dir = absl::StrCat(dir, "/", name);
    const absl::Status ok =
        IsDirectory(step_dir) ? check(step_dir) : absl::DataLossError("missing");
    if (ok.ok()) {
      std::string note;
      if (!skipped.empty()) {
        note = absl::StrCat(absl::StrJoin(skipped, ", "), "; resuming from ", name);
      } else if (name != latest_name) {
        note = absl::StrCat("resuming from ", name, ", sealed after ", kLatestFileName,
                            " last moved (it names ", latest_name, ")");
      }
      return CheckpointStep{step_dir, step, note, damaged};
    }
    skipped.push_back(absl::StrCat(name, " is damaged (", ok.message(), ")"));
    if (IsDirectory(step_dir)) damaged.push_back(step_dir);
  }
  return absl::DataLossError(
      absl::StrCat("no intact checkpoint in ", dir, ": ", absl::StrJoin(skipped, ", ")));
}

}  // namespace

absl::StatusOr<CheckpointStep> ResolveCheckpoint(const std::string& path, const StepCheck& check) {
  const std::string dir = AbsolutePath(path);
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", dir, Exists(dir) ? " is not a directory" : " does not exist"));
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
    if (check) {
      // The newest intact sealed step; an earlier one when it is damaged.
      int64_t step = 0;
      absl::string_view number = name;
      if (!absl::ConsumePrefix(&number, "step_") || !absl::SimpleAtoi(number, &step)) {
        return absl::DataLossError(absl::StrCat(latest, " names ", name, ", not a step"));
      }
      return NewestIntactStep(dir, name, step, check);
    }
    if (!IsDirectory(out.step_dir)) {
      return absl::DataLossError(
          absl::StrCat(latest, " names ", name, ", which is not a directory in ", dir));
    }
  } else if (!Exists(absl::StrCat(dir, "/", kModelFileName)) &&
             !Exists(absl::StrCat(dir, "/", kShardedManifestFileName)) &&
             !absl::StartsWith(dir.substr(dir.rfind('/') + 1), "step_")) {
    // Not a step directory (those are accepted as they are: the loaders say what is missing).
    const std::vector<std::string> jobs = SubdirectoriesIn(dir, IsJobId);
    if (!jobs.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, " holds the directories of jobs ", absl::StrJoin(jobs, ", "),
                       " but no checkpoint of its own: name one of them (", dir, "/", jobs.back(),
                       "), or the job id"));
    }
    const std::vector<std::string> steps = SubdirectoriesIn(
        dir, [](absl::string_view name) { return absl::StartsWith(name, "step_"); });
    if (!steps.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, " has no sealed checkpoint: no ", kLatestFileName, ", and its steps (",
                       absl::StrJoin(steps, ", "),
                       ") were never sealed (a save that did not finish leaves a "
                       "step without ",
                       kShardedManifestFileName, " or ", kOptimizerFileName, ")"));
    }
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a checkpoint: it has no ",
                                                      kLatestFileName, ", ", kModelFileName, " or ",
                                                      kShardedManifestFileName));
  }
  ASSIGN_OR_RETURN(out.step, StepOfDirectory(out.step_dir));
  return out;
}

absl::Status CheckStepsBeyond(int64_t steps, const CheckpointStep& checkpoint) {
  if (steps > checkpoint.step) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("steps=", steps, " is not beyond step ", checkpoint.step, " of the checkpoint ",
                   checkpoint.step_dir,
                   " (resume_from): there is nothing to train; set steps above ", checkpoint.step));
}

}  // namespace dtrain::model
