#include "worker/model/checkpoint_dir.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "proto/checkpoint.pb.h"

namespace dtrain::model {
namespace {

using Kind = HeldDirectory::Kind;

// `latest` holds one step directory's name and a newline: far less than this.
constexpr int64_t kMaxLatestBytes = 4096;

bool IsStepName(absl::string_view name) { return absl::StartsWith(name, "step_"); }

// The step number of a name "step_00000042", or nothing.
std::optional<int64_t> StepOfName(absl::string_view name) {
  int64_t step = 0;
  if (absl::ConsumePrefix(&name, "step_") && !name.empty() && absl::SimpleAtoi(name, &step) &&
      step >= 0) {
    return step;
  }
  return std::nullopt;
}

bool IsSealed(const HeldDirectory& step) {
  return step.KindOf(kShardedManifestFileName) == Kind::kFile ||
         step.KindOf(kOptimizerFileName) == Kind::kFile;
}

// The real (not symlinked) subdirectories of `dir` whose names `want` accepts, sorted.
std::vector<std::string> SubdirectoriesIn(const HeldDirectory& dir,
                                          bool (*want)(absl::string_view name)) {
  std::vector<std::string> found;
  absl::StatusOr<std::vector<std::string>> names = dir.Names();
  if (!names.ok()) return found;
  for (const std::string& name : *names) {
    if (want(name) && dir.KindOf(name) == Kind::kDirectory) found.push_back(name);
  }
  return found;
}

absl::StatusOr<int64_t> StepOfDirectory(const HeldDirectory& step_dir) {
  absl::string_view name = step_dir.path();
  name = name.substr(name.rfind('/') + 1);
  if (std::optional<int64_t> step = StepOfName(name)) return *step;
  if (step_dir.KindOf(kShardedManifestFileName) == Kind::kFile) {
    // Only the step: worker/parallel/manifest.h reads and checks the rest when it loads.
    ASSIGN_OR_RETURN(std::string json,
                     step_dir.ReadFile(kShardedManifestFileName, kMaxManifestBytes));
    CheckpointManifest proto;
    const auto parsed = google::protobuf::util::JsonStringToMessage(json, &proto);
    if (!parsed.ok() || proto.step() < 0) {
      return absl::DataLossError(
          absl::StrCat(step_dir.PathOf(kShardedManifestFileName),
                       " has no valid \"step\": ", std::string(parsed.message())));
    }
    return proto.step();
  }
  ASSIGN_OR_RETURN(SafetensorsFile model, SafetensorsFile::Open(step_dir.PathOf(kModelFileName)));
  return StepOf(model);
}

// The sealed steps of job directory `dir`, newest first: real step directories with a seal (a
// sharded step's manifest.json or one worker's optimizer.safetensors).
std::vector<std::pair<int64_t, std::string>> SealedSteps(const HeldDirectory& dir) {
  std::vector<std::pair<int64_t, std::string>> sealed;
  for (const std::string& name : SubdirectoriesIn(dir, IsStepName)) {
    const std::optional<int64_t> step = StepOfName(name);
    if (!step.has_value()) continue;
    absl::StatusOr<HeldDirectory> step_dir = dir.OpenSubdirectory(name);
    if (step_dir.ok() && IsSealed(*step_dir)) sealed.emplace_back(*step, name);
  }
  std::sort(sealed.rbegin(), sealed.rend());
  return sealed;
}

// What `latest` names: the step directory's name, or why it names none (missing, empty, a
// symlink, oversized, garbage), in words for the job's log.
struct Latest {
  std::string name;  // set when it names a step directory
  int64_t step = 0;
  std::string problem;  // set otherwise
};

Latest ReadLatest(const HeldDirectory& dir) {
  Latest latest;
  if (dir.KindOf(kLatestFileName) == Kind::kMissing) {
    latest.problem = absl::StrCat(kLatestFileName, " is missing");
    return latest;
  }
  absl::StatusOr<std::string> text = dir.ReadFile(kLatestFileName, kMaxLatestBytes);
  if (!text.ok()) {
    latest.problem =
        absl::StrCat(kLatestFileName, " is unreadable (", text.status().message(), ")");
    return latest;
  }
  const absl::string_view name = absl::StripAsciiWhitespace(*text);
  if (name.empty()) {
    latest.problem = absl::StrCat(kLatestFileName, " is empty");
    return latest;
  }
  const std::optional<int64_t> step = StepOfName(name);
  if (!step.has_value() || !IsPlainFileName(name)) {
    latest.problem = absl::StrCat(kLatestFileName, " holds \"", QuoteBytes(name),
                                  "\", not the name of a step directory");
    return latest;
  }
  latest.name = std::string(name);
  latest.step = *step;
  return latest;
}

// The newest intact sealed step of job directory `dir`: `latest`'s, unless it is damaged or
// missing, or a newer one that was sealed while `latest` had not moved yet (a seal cut short
// between its manifest and `latest`); without a usable `latest`, the newest found by scanning.
// The note says what was skipped, or why `latest` was not followed.
absl::StatusOr<CheckpointStep> NewestIntactStep(const HeldDirectory& dir, const Latest& latest,
                                                const StepCheck& check) {
  std::vector<std::pair<int64_t, std::string>> candidates = SealedSteps(dir);
  if (!latest.name.empty() &&
      std::find(candidates.begin(), candidates.end(), std::make_pair(latest.step, latest.name)) ==
          candidates.end()) {
    candidates.emplace_back(latest.step, latest.name);
    std::sort(candidates.rbegin(), candidates.rend());
  }
  std::vector<std::string> skipped, damaged;
  for (const auto& [step, name] : candidates) {
    const std::string step_dir = dir.PathOf(name);
    const Kind kind = dir.KindOf(name);
    const absl::Status ok =
        kind == Kind::kDirectory ? (check ? check(step_dir) : absl::OkStatus())
        : kind == Kind::kMissing
            ? absl::DataLossError("missing")
            : absl::DataLossError("a symbolic link or special file, never followed");
    if (ok.ok()) {
      std::vector<std::string> said;
      if (!latest.problem.empty()) said.push_back(latest.problem);
      for (const std::string& s : skipped) said.push_back(s);
      std::string note;
      if (!said.empty()) {
        note = absl::StrCat(absl::StrJoin(said, ", "), "; resuming from ", name,
                            latest.name.empty() ? ", the newest intact sealed step" : "");
      } else if (name != latest.name) {
        note = absl::StrCat("resuming from ", name, ", sealed after ", kLatestFileName,
                            " last moved (it names ", latest.name, ")");
      }
      return CheckpointStep{step_dir, step, note, damaged};
    }
    skipped.push_back(absl::StrCat(name, " is damaged (", ok.message(), ")"));
    if (kind == Kind::kDirectory) damaged.push_back(step_dir);
  }
  if (!latest.problem.empty()) skipped.insert(skipped.begin(), latest.problem);
  return absl::DataLossError(
      absl::StrCat("no intact checkpoint in ", dir.path(), ": ", absl::StrJoin(skipped, ", ")));
}

bool IsDirectoryPath(const std::string& path, bool* exists) {
  absl::StatusOr<HeldDirectory> d = HeldDirectory::Open(path);
  *exists = d.ok() || !absl::IsNotFound(d.status());
  return d.ok();
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

absl::StatusOr<HeldDirectory> OpenStepDirectory(const std::string& step_dir) {
  const std::string path = AbsolutePath(step_dir);
  const size_t slash = path.rfind('/');
  if (slash == 0) return HeldDirectory::Open(path);  // "/": no parent to hold
  ASSIGN_OR_RETURN(const HeldDirectory parent, HeldDirectory::Open(path.substr(0, slash)));
  return parent.OpenSubdirectory(path.substr(slash + 1));
}

absl::StatusOr<HeldDirectory> PrepareStepDirectory(const HeldDirectory& dir, int64_t step,
                                                   absl::string_view seal_file) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("negative step ", step));
  const std::string name = StepDirName(step);
  const Kind kind = dir.KindOf(name);
  if (kind == Kind::kOther || kind == Kind::kFile) {
    // Not ours to follow: a symlink planted where the step goes is replaced by the step.
    RETURN_IF_ERROR(dir.Remove(name));
  }
  ASSIGN_OR_RETURN(HeldDirectory step_dir, dir.CreateSubdirectory(name));
  // A sealed step is never written again: loading a checkpoint must not unseal it, and another
  // writer's finished step is not ours to replace.
  if (step_dir.KindOf(seal_file) != Kind::kMissing) {
    return absl::FailedPreconditionError(
        absl::StrCat("will not overwrite ", step_dir.path(), ": it is a sealed checkpoint (it has ",
                     seal_file, "; a finished checkpoint is never rewritten)"));
  }
  return step_dir;
}

absl::StatusOr<std::string> PrepareStepDirectory(const std::string& dir, int64_t step,
                                                 absl::string_view seal_file) {
  ASSIGN_OR_RETURN(const HeldDirectory held, HeldDirectory::Create(dir));
  ASSIGN_OR_RETURN(const HeldDirectory step_dir, PrepareStepDirectory(held, step, seal_file));
  return step_dir.path();
}

absl::Status PointLatestAt(const HeldDirectory& dir, int64_t step) {
  return dir.WriteFileAtomically(kLatestFileName, StepDirName(step) + "\n");
}

absl::Status PointLatestAt(const std::string& dir, int64_t step) {
  ASSIGN_OR_RETURN(const HeldDirectory held, HeldDirectory::Open(dir));
  return PointLatestAt(held, step);
}

bool HasSealedStep(const std::string& dir) {
  absl::StatusOr<HeldDirectory> held = HeldDirectory::Open(dir);
  return held.ok() && !SealedSteps(*held).empty();
}

std::vector<int64_t> SealedStepsIn(const std::string& dir) {
  absl::StatusOr<HeldDirectory> held = HeldDirectory::Open(dir);
  if (!held.ok()) return {};
  std::vector<int64_t> steps;
  for (const auto& [step, name] : SealedSteps(*held)) steps.push_back(step);
  std::reverse(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::string> RemoveOrphans(const HeldDirectory& dir) {
  auto is_temp = [](absl::string_view name) { return absl::StrContains(name, ".tmp."); };
  std::vector<std::string> steps, temps;
  ASSIGN_OR_RETURN(const std::vector<std::string> names, dir.Names());
  for (const std::string& name : names) {
    if (is_temp(name) && dir.KindOf(name) == Kind::kFile) {
      RETURN_IF_ERROR(dir.Remove(name));
      temps.push_back(name);
      continue;
    }
    if (!StepOfName(name).has_value() || dir.KindOf(name) != Kind::kDirectory) continue;
    ASSIGN_OR_RETURN(const HeldDirectory step, dir.OpenSubdirectory(name));
    if (!IsSealed(step)) {
      RETURN_IF_ERROR(dir.Remove(name));
      steps.push_back(name);
      continue;
    }
    ASSIGN_OR_RETURN(const std::vector<std::string> inside, step.Names());
    for (const std::string& file : inside) {
      if (is_temp(file) && step.KindOf(file) == Kind::kFile) {
        RETURN_IF_ERROR(step.Remove(file));
        temps.push_back(absl::StrCat(name, "/", file));
      }
    }
  }
  if (steps.empty() && temps.empty()) return std::string();
  std::vector<std::string> parts;
  if (!steps.empty()) {
    parts.push_back(absl::StrCat("removed ", steps.size(), " unsealed step",
                                 steps.size() == 1 ? "" : "s", " (", absl::StrJoin(steps, ", "),
                                 ")"));
  }
  if (!temps.empty()) {
    constexpr size_t kNamed = 3;
    const std::vector<std::string> named(temps.begin(),
                                         temps.begin() + std::min(kNamed, temps.size()));
    parts.push_back(absl::StrCat(steps.empty() ? "removed " : "", temps.size(), " temporary file",
                                 temps.size() == 1 ? "" : "s", " (", absl::StrJoin(named, ", "),
                                 temps.size() > kNamed ? ", ..." : "", ")"));
  }
  return absl::StrCat(absl::StrJoin(parts, " and "), " left in ", dir.path(),
                      " by an earlier run that did not finish them");
}

absl::StatusOr<std::vector<std::string>> PruneSealedSteps(const HeldDirectory& dir, int keep_last,
                                                          int64_t keep_every, int64_t keep_step) {
  if (keep_last < 1) {
    return absl::InvalidArgumentError(absl::StrCat("keep_last=", keep_last, " must be >= 1"));
  }
  const Latest latest = ReadLatest(dir);
  const std::vector<std::pair<int64_t, std::string>> sealed = SealedSteps(dir);  // newest first
  std::vector<std::string> deleted;
  for (size_t i = sealed.size(); i-- > static_cast<size_t>(keep_last);) {  // oldest first
    const auto& [step, name] = sealed[i];
    if ((keep_every > 0 && step % keep_every == 0) || name == latest.name || step == keep_step) {
      continue;
    }
    RETURN_IF_ERROR(dir.Remove(name));
    deleted.push_back(name);
  }
  return deleted;
}

absl::StatusOr<CheckpointStep> ResolveCheckpoint(const std::string& path, const StepCheck& check) {
  const std::string dir = AbsolutePath(path);
  bool exists = false;
  if (!IsDirectoryPath(dir, &exists)) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", dir, exists ? " is not a directory" : " does not exist"));
  }
  ASSIGN_OR_RETURN(const HeldDirectory held, HeldDirectory::Open(dir));
  const bool names_step = IsStepName(dir.substr(dir.rfind('/') + 1));
  const bool has_seal = held.KindOf(kShardedManifestFileName) == Kind::kFile ||
                        held.KindOf(kOptimizerFileName) == Kind::kFile;
  if (names_step || has_seal) {
    // A step directory named directly: returned as it is (its loader verifies what it reads).
    ASSIGN_OR_RETURN(const HeldDirectory step_dir, OpenStepDirectory(dir));
    ASSIGN_OR_RETURN(const int64_t step, StepOfDirectory(step_dir));
    return CheckpointStep{dir, step, "", {}};
  }
  const Latest latest = ReadLatest(held);
  if (check || latest.name.empty()) {
    // Resuming: the newest intact sealed step (an earlier one when it is damaged). Without a
    // usable `latest`, found by scanning the step directories.
    if (!latest.name.empty() || !SealedSteps(held).empty()) {
      return NewestIntactStep(held, latest, check);
    }
  } else {
    if (held.KindOf(latest.name) != Kind::kDirectory) {
      return absl::DataLossError(absl::StrCat(held.PathOf(kLatestFileName), " names ", latest.name,
                                              ", which is not a directory in ", dir));
    }
    ASSIGN_OR_RETURN(const HeldDirectory step_dir, held.OpenSubdirectory(latest.name));
    ASSIGN_OR_RETURN(const int64_t step, StepOfDirectory(step_dir));
    return CheckpointStep{step_dir.path(), step, "", {}};
  }
  // No sealed step at all.
  const std::vector<std::string> jobs = SubdirectoriesIn(held, IsJobId);
  if (!jobs.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " holds the directories of jobs ", absl::StrJoin(jobs, ", "),
                     " but no checkpoint of its own: name one of them (", dir, "/", jobs.back(),
                     "), or the job id"));
  }
  const std::vector<std::string> steps = SubdirectoriesIn(held, IsStepName);
  if (!steps.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " has no sealed checkpoint: ", latest.problem, ", and its steps (",
                     absl::StrJoin(steps, ", "),
                     ") were never sealed (a save that did not finish leaves a step without ",
                     kShardedManifestFileName, " or ", kOptimizerFileName, ")"));
  }
  if (held.KindOf(kModelFileName) == Kind::kFile) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " holds a job's final weights (", kModelFileName,
        ") but no checkpoint step: the job kept none to resume. The weights are already one "
        "GPT-2 safetensors file: use ",
        dir, "/", kModelFileName, " directly (init_checkpoint, or PyTorch)"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(dir, " is not a checkpoint: it has no ", kLatestFileName, ", step directory, ",
                   kModelFileName, " or ", kShardedManifestFileName));
}

absl::Status CheckStepsBeyond(int64_t steps, const CheckpointStep& checkpoint) {
  if (steps > checkpoint.step) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("steps=", steps, " is not beyond step ", checkpoint.step, " of the checkpoint ",
                   checkpoint.step_dir,
                   " (resume_from): there is nothing to train; set steps above ", checkpoint.step));
}

}  // namespace dtrain::model
