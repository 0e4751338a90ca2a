// Sampling a job's model (CoordinatorService.SampleJob: `dtrain sample JOB`, the console's
// Sample): what it is drawn from, and THE bounds of what may be asked, checked by the coordinator
// and by the console before it asks, so a bad request is refused the same way wherever it comes
// from.
#ifndef DTRAIN_PLAN_JOB_SAMPLE_H_
#define DTRAIN_PLAN_JOB_SAMPLE_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace dtrain::plan {

inline constexpr int kMaxSampleTokens = 1024;
inline constexpr size_t kMaxSamplePromptBytes = 4096;
inline constexpr double kMaxSampleTemperature = 100;
inline constexpr int kMaxSampleTopK = 1 << 20;

// INVALID_ARGUMENT naming the parameter: tokens 1..kMaxSampleTokens, temperature a finite number
// from 0 to kMaxSampleTemperature, top_k 0..kMaxSampleTopK, a prompt over kMaxSamplePromptBytes.
absl::Status CheckSampleParameters(const SampleParameters& parameters);

// What a job is sampled from: its newest sealed checkpoint's directory, else its final weights
// with the spec's head count (a safetensors file does not say it). FailedPrecondition when it
// has neither yet.
struct SampleSource {
  std::string path;
  int n_head = 0;    // 0: the checkpoint's own
  std::string what;  // "checkpoint /ck/job-000003 (step 40)", "final weights /out/model"
};
absl::StatusOr<SampleSource> SampleSourceOf(const Job& job);

// Who draws a job's sample, of `workers` (ListWorkers'): a live worker of the host that holds
// the job's files (Job.checkpoint.host, else the host of rank 0's worker), an idle one before a
// busy one (a sample loads the whole model beside the busy one's job), rank 0's worker of the
// job's last run before the others (it wrote the files), then by id. "" when none is live there.
std::string SamplerOf(const Job& job,
                      const google::protobuf::RepeatedPtrField<WorkerInfo>& workers);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_JOB_SAMPLE_H_
