#include "plan/spec_paths.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_paths.h"
#include "common/path_policy.h"
#include "plan/spec_json.h"

namespace dtrain::plan {
namespace {

// "w1: /a, /b; w2: /c", workers with the same roots named together ("w1, w2: /a").
std::string DescribeRoots(const std::vector<WorkerRoots>& workers) {
  std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> groups;
  for (const auto& [id, roots] : workers) {
    auto same =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == roots; });
    if (same == groups.end()) {
      groups.push_back({roots, {id}});
    } else {
      same->second.push_back(id);
    }
  }
  std::vector<std::string> parts;
  for (const auto& [roots, ids] : groups) {
    parts.push_back(absl::StrCat(absl::StrJoin(ids, ", "), ": ", absl::StrJoin(roots, ", ")));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace

std::vector<SpecPath> SpecPaths(const JobSpec& spec) {
  std::vector<SpecPath> paths;
  auto add = [&](const char* field, const std::string& path) {
    if (!path.empty()) paths.push_back({field, path});
  };
  add("dataset", spec.dataset());
  add("init_checkpoint", spec.init_checkpoint());
  if (!IsJobId(spec.resume_from())) add("resume_from", spec.resume_from());
  add("checkpoint.dir", spec.checkpoint().dir());
  add("eval.dataset", spec.eval().dataset());
  return paths;
}

absl::Status CheckSpecPaths(const JobSpec& spec, const std::vector<WorkerRoots>& workers) {
  std::vector<WorkerRoots> declared;
  for (const WorkerRoots& w : workers) {
    if (!w.second.empty()) declared.push_back(w);
  }
  std::vector<std::string> problems;
  for (const SpecPath& p : SpecPaths(spec)) {
    if (absl::Status shape = CheckPathShape(p.field, p.path); !shape.ok()) {
      problems.emplace_back(shape.message());
      continue;
    }
    if (p.path[0] != '/' || declared.empty()) continue;
    // Every worker the job may be placed on must allow it: placement does not look at roots,
    // and one worker's claim (a fake one declaring "/") must not widen the check for the rest.
    std::vector<WorkerRoots> refusing;
    for (const WorkerRoots& w : declared) {
      if (!IsInsideRootsLexically(p.path, w.second)) refusing.push_back(w);
    }
    if (refusing.size() == declared.size()) {
      problems.push_back(absl::StrCat(
          p.field, " ", p.path, " is outside the allowed roots of every registered worker (",
          DescribeRoots(declared), "): set --allowed_paths on the workers to allow it"));
    } else if (!refusing.empty()) {
      problems.push_back(
          absl::StrCat(p.field, " ", p.path, " is outside the allowed roots of ",
                       refusing.size() == 1 ? "worker " : "workers ", DescribeRoots(refusing),
                       ", which the job may be placed on: every such worker must allow it (set "
                       "--allowed_paths on the workers to allow it)"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return InvalidSpec(problems);
}

}  // namespace dtrain::plan
