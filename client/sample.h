// `dtrain sample`: runs dtrain-sample (worker/sample_main.cc), the binary that links the model
// and the kernels, which the CLI does not (tests/layers). It is looked for in $DTRAIN_SAMPLE,
// then beside the dtrain binary, then on PATH; its output goes straight to this terminal.
//
//   int code = RunSampler("/ckpt/job-000003", inv, std::cerr);   // dtrain-sample's exit code
#ifndef DTRAIN_CLIENT_SAMPLE_H_
#define DTRAIN_CLIENT_SAMPLE_H_

#include <ostream>
#include <string>
#include <vector>

#include "client/arguments.h"

namespace dtrain {
namespace client {

inline constexpr char kSampleBinaryEnv[] = "DTRAIN_SAMPLE";

// dtrain-sample's arguments for `checkpoint` and the sample flags of `inv`.
std::vector<std::string> SamplerArguments(const std::string& checkpoint, const Invocation& inv);

// Runs dtrain-sample and waits; its exit code (2 when it cannot be started, said on `err`).
int RunSampler(const std::string& checkpoint, const Invocation& inv, std::ostream& err);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_SAMPLE_H_
