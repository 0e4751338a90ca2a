// `dtrain sample`: of a CHECKPOINT path, run dtrain-sample here (worker/sample_main.cc), the
// binary that links the model and the kernels, which the CLI does not (tests/layers), looked for
// in $DTRAIN_SAMPLE, then beside the dtrain binary, then on PATH, its output straight to the
// terminal; of a JOB, the coordinator's SampleJob (a worker that can read the job's files draws
// it), with the same flags as SampleParameters.
//
//   int code = RunSampler("/ckpt/job-000003", inv, std::cerr);   // dtrain-sample's exit code
//   absl::StatusOr<SampleParameters> p = SampleParametersOf(inv);  // for SampleJob
#ifndef DTRAIN_CLIENT_SAMPLE_H_
#define DTRAIN_CLIENT_SAMPLE_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/arguments.h"
#include "proto/coordinator.pb.h"

namespace dtrain {
namespace client {

inline constexpr char kSampleBinaryEnv[] = "DTRAIN_SAMPLE";
// How long `dtrain sample JOB` and the console wait for a job's sample (SampleJob's deadline).
inline constexpr absl::Duration kSampleWait = absl::Minutes(2);

// dtrain-sample's arguments for `checkpoint` and the sample flags of `inv`.
std::vector<std::string> SamplerArguments(const std::string& checkpoint, const Invocation& inv);

// Runs dtrain-sample and waits; its exit code (2 when it cannot be started, said on `err`).
int RunSampler(const std::string& checkpoint, const Invocation& inv, std::ostream& err);

// The sample flags of `inv` as SampleJob takes them; INVALID_ARGUMENT naming the flag as typed
// when out of plan/job_sample.h's bounds (the coordinator's).
absl::StatusOr<SampleParameters> SampleParametersOf(const Invocation& inv);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_SAMPLE_H_
