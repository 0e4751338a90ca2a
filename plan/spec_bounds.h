// The bounds of a job spec, checked before anything parses it: protobuf's JSON reader takes time
// that grows with the square of the nesting depth (3 s at depth 10,000), and an error that quotes
// a megabyte-long field does not fit in a gRPC status. One linear pass over the text, with no
// recursion, refuses what is too deep or too long; it names the cap and the byte offset:
//
//   "invalid job spec: nesting depth exceeds 64 at byte 71"
//   "invalid job spec: field \"name\" is 300 bytes, above the cap of 256 (at byte 10)"
//
// The caps are the same for a spec sent as a message (CheckSpecFieldLengths).
#ifndef DTRAIN_PLAN_SPEC_BOUNDS_H_
#define DTRAIN_PLAN_SPEC_BOUNDS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace dtrain::plan {

// Deepest nesting of objects and arrays a spec may have. A valid JobSpec needs 3
// ({"parallel": {"stage_layers": [...]}}); the rest is room for whatever comes.
inline constexpr int kMaxSpecDepth = 64;
// Longest field name: JobSpec's longest is 25 bytes.
inline constexpr int64_t kMaxSpecKeyBytes = 64;
// Most elements of one array (stage_layers has one per pipeline stage).
inline constexpr int64_t kMaxSpecArrayItems = 4096;

// The longest value a string field named `field` (its proto name, e.g. "dataset", or its JSON
// spelling) may hold: 256 bytes for "name", 4096 (PATH_MAX) for paths, 64 for the rest (words
// such as "1f1b", "cuda", "60s").
int64_t SpecStringCap(absl::string_view field);

// InvalidArgument "invalid job spec: ..." when `json` nests deeper than kMaxSpecDepth, has an
// array of more than kMaxSpecArrayItems, a key longer than kMaxSpecKeyBytes or a string value
// longer than SpecStringCap of its key; OK otherwise, malformed JSON included (the parser names
// that). Time and memory linear in json.size(), independent of the depth.
absl::Status CheckSpecJsonBounds(absl::string_view json);

// The same string caps for a spec sent as a message: InvalidArgument naming the first string
// field (with its path, "checkpoint.dir") above its cap.
absl::Status CheckSpecFieldLengths(const JobSpec& spec);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_SPEC_BOUNDS_H_
