// The size caps of dtrain's gRPC messages, one decision for every server and channel of the
// coordinator's service (coordinator/coordinator_service.h StartServer, the worker's
// CoordinatorClient, the CLI's CoordinatorStub). A message above it is refused by gRPC with
// RESOURCE_EXHAUSTED ("Received message larger than max"), the call fails and nothing else does.
// The peer transport between workers (worker/comm) frames tensors in chunks and sets its own.
#ifndef DTRAIN_COMMON_GRPC_LIMITS_H_
#define DTRAIN_COMMON_GRPC_LIMITS_H_

namespace dtrain {

// Largest message received on a coordinator channel, either way: 4 MiB. A job spec is capped
// well below it (dtrain-coordinator --max_spec_bytes, 1 MiB by default); the largest answers
// (ListJobs of 1,000 jobs, an assignment of 1,024 ranks) are a fraction of it.
inline constexpr int kMaxCoordinatorMessageBytes = 4 << 20;

// Most steps one progress report carries (ReportProgressRequest.steps, a StepRun): about 60 KiB
// of StepMetrics. The worker sends runs up to it; the coordinator refuses a longer one.
inline constexpr int kMaxStepRun = 1024;

// Most steps one GetJobSteps answer carries when asked (GetJobStepsRequest.max_steps), and how
// many when not: about 1.2 MiB and 120 KiB of StepMetrics.
inline constexpr int kMaxThinnedSteps = 20000;
inline constexpr int kDefaultThinnedSteps = 2000;

}  // namespace dtrain

#endif  // DTRAIN_COMMON_GRPC_LIMITS_H_
