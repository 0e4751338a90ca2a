// The paths a job spec names on the workers, and the submit-time check of them against the
// roots workers declared (common/path_policy.h has the rule; the workers apply it again after
// symlinks before they read or write anything).
//
//   for (const SpecPath& p : SpecPaths(spec)) ...   // {"dataset", "data/demo.txt"}, ...
//   RETURN_IF_ERROR(CheckSpecPaths(spec, {{"w1", {"/var/lib/dtrain", "/datasets"}}}));
#ifndef DTRAIN_PLAN_SPEC_PATHS_H_
#define DTRAIN_PLAN_SPEC_PATHS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace dtrain::plan {

struct SpecPath {
  std::string field;  // its JSON field: "dataset", "init_checkpoint", "resume_from",
                      // "checkpoint.dir", "eval.dataset"
  std::string path;   // as the spec names it (never empty)
};

// Every path `spec` names, in that field order; unset fields and a resume_from that is a job id
// (the coordinator resolves it to a path at submit) are left out.
std::vector<SpecPath> SpecPaths(const JobSpec& spec);

// A worker's id and its declared roots (WorkerInfo.allowed_roots).
using WorkerRoots = std::pair<std::string, std::vector<std::string>>;

// The coordinator's check at submit: InvalidArgument "invalid job spec: ..." listing every
// path that climbs out with ".." (relative ones: common/path_policy.h CheckPathShape) or, when
// absolute, lies (lexically) outside the roots of ANY worker of `workers` (the live workers the
// job may be placed on), naming the path and the refusing workers' roots. A worker's declared
// roots can narrow what a job may name, never widen it: a worker claiming "/" allows nothing
// the others refuse. Workers that declared no roots are not counted; with none left only the
// ".." rule applies (the worker checks the rest). Relative paths resolve on the worker, from
// its working directory, which the coordinator does not know: only the worker checks them.
absl::Status CheckSpecPaths(const JobSpec& spec, const std::vector<WorkerRoots>& workers);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_SPEC_PATHS_H_
