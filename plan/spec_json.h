// Job specs as users write them: a dtrain.JobSpec (proto/job.proto) in protobuf's JSON mapping,
// so its keys are the proto field names (lowerCamelCase spellings are accepted too, as protobuf
// does):
//
//   {"name": "tiny", "model": {"vocab_size": 256, "context": 64, "n_layer": 4, "n_head": 4,
//    "n_embd": 64}, "dataset": "/data/tiny.bin", "steps": 100, "batch_size": 8,
//    "parallel": {"dp": 2, "pp": 2, "tp": 1, "schedule": "1f1b"}}
//
// Reading only; what a spec means (its rules and defaults) is job_plan.h's MakeJobPlan.
#ifndef DTRAIN_PLAN_SPEC_JSON_H_
#define DTRAIN_PLAN_SPEC_JSON_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace dtrain::plan {

// Reads `json` into `spec`, ignoring unknown fields, each of which it appends to `problems`
// with its path and a "did you mean" when a known field is close: `unknown field
// "parallel.tpp" (did you mean "tp"?)`. InvalidArgument only for what stops reading
// altogether: malformed JSON ("job spec is not valid JSON: line 4, column 3: expected ',' or
// '}' after a field's value, found '\"'"), or a value of the wrong type ("steps": "ten";
// protobuf names the first one only; the message then lists `problems` too).
absl::Status ReadJobSpecJson(absl::string_view json, JobSpec* spec,
                             std::vector<std::string>* problems);

// ReadJobSpecJson, with unknown fields as errors: InvalidArgument "invalid job spec: unknown
// field ...; ...". Does not validate or default (MakeJobPlan does).
absl::StatusOr<JobSpec> ParseJobSpecJson(absl::string_view json);

// THE error of a spec that breaks rules: InvalidArgument "invalid job spec: <problem>; <problem>;
// ..." (`problems` not empty). Every check of a spec (reading, MakeJobPlan, CheckJobLimits,
// CheckSpecPaths, the coordinator's submit) builds its refusal here, so the CLI can strip the
// prefix once (client/commands_offline.cc) and list the problems.
absl::Status InvalidSpec(absl::Span<const std::string> problems);
absl::Status InvalidSpec(absl::string_view problem);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_SPEC_JSON_H_
