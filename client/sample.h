// `dtrain sample` and the console's samples: run dtrain-sample (worker/sample_main.cc), the
// binary that links the model and the kernels, which the CLI does not (tests/layers). It is
// looked for in $DTRAIN_SAMPLE, then beside the dtrain binary, then on PATH. The CLI's output
// goes straight to its terminal; the console's is captured (CaptureSample).
//
//   int code = RunSampler("/ckpt/job-000003", inv, std::cerr);   // dtrain-sample's exit code
//   absl::StatusOr<std::string> json = CaptureSample("/ckpt/job-000003", inv, absl::Minutes(1));
#ifndef DTRAIN_CLIENT_SAMPLE_H_
#define DTRAIN_CLIENT_SAMPLE_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/arguments.h"
#include "proto/job.pb.h"

namespace dtrain {
namespace client {

inline constexpr char kSampleBinaryEnv[] = "DTRAIN_SAMPLE";

// dtrain-sample's arguments for `checkpoint` and the sample flags of `inv`.
std::vector<std::string> SamplerArguments(const std::string& checkpoint, const Invocation& inv);

// Runs dtrain-sample and waits; its exit code (2 when it cannot be started, said on `err`).
int RunSampler(const std::string& checkpoint, const Invocation& inv, std::ostream& err);

// What a job is sampled from (`dtrain sample JOB`, the console): its newest sealed checkpoint's
// directory, else its final weights with the spec's head count (a safetensors file does not
// say it). FailedPrecondition when it has neither yet.
struct SampleSource {
  std::string path;
  int n_head = 0;    // 0: the checkpoint's own
  std::string what;  // "checkpoint /ck/job-000003 (step 40)", "final weights /out/model"
};
absl::StatusOr<SampleSource> SampleSourceOf(const Job& job);

// Runs dtrain-sample with --json on `checkpoint` and returns its one line (prompt_tokens,
// tokens, text). InvalidArgument with its last words when it refuses the request (exit 2: a
// prompt too long for the context, no such checkpoint...), Internal when it fails otherwise,
// DeadlineExceeded (the process killed) past `timeout`; at most 1 MiB of output is kept.
absl::StatusOr<std::string> CaptureSample(const std::string& checkpoint, const Invocation& inv,
                                          absl::Duration timeout);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_SAMPLE_H_
