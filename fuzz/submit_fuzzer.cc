// Fuzzes the whole of what the coordinator does with a submitted spec before it stores a job
// (coordinator/submit_spec.h PlanSubmission: size cap, string caps and nesting depth before any
// parse, the JSON read, the plan, the job limits) on any bytes as spec_json. Nothing may crash,
// and each input must be answered within a second whatever its nesting: protobuf's JSON reader is
// quadratic in the depth, which is why the depth is capped before it runs (seeds: deep arrays
// and objects, brackets inside strings, over-long strings).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "coordinator/submit_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dtrain::SubmitJobRequest request;
  request.set_spec_json(std::string(reinterpret_cast<const char*>(data), size));
  const absl::Time start = absl::Now();
  absl::StatusOr<dtrain::JobPlan> plan =
      dtrain::coordinator::PlanSubmission(request, 1 << 20, dtrain::plan::JobLimits());
  // A quadratic parse of a 64 KiB input (depth 32,000) would take tens of seconds.
  if (absl::Now() - start > absl::Seconds(1)) {
    std::fprintf(stderr, "PlanSubmission took %s on this spec\n",
                 absl::FormatDuration(absl::Now() - start).c_str());
    std::abort();
  }
  if (!plan.ok() && plan.status().message().size() > 8192) {
    std::fprintf(stderr, "a refusal of %zu bytes: too long for a gRPC status\n",
                 plan.status().message().size());
    std::abort();
  }
  return 0;
}
