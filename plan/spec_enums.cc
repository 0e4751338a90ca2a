#include "plan/spec_enums.h"

#include <utility>

namespace dtrain::plan {
namespace {

// Each enum's values and their spec text, in one table.
template <typename Enum>
using Names = std::initializer_list<std::pair<Enum, absl::string_view>>;

constexpr Names<PipelineSchedule> kSchedules = {{SCHEDULE_GPIPE, "gpipe"},
                                                {SCHEDULE_1F1B, "1f1b"},
                                                {SCHEDULE_INTERLEAVED, "interleaved"},
                                                {SCHEDULE_ZB_H1, "zb-h1"}};
constexpr Names<JobDevice> kDevices = {
    {DEVICE_AUTO, "auto"}, {DEVICE_CPU, "cpu"}, {DEVICE_CUDA, "cuda"}};
constexpr Names<MatmulPrecision> kPrecisions = {
    {MATMUL_FP32, "fp32"}, {MATMUL_TF32, "tf32"}, {MATMUL_BF16, "bf16"}};
constexpr Names<WorkerLossPolicy> kWorkerLoss = {{WORKER_LOSS_WAIT, "wait"},
                                                 {WORKER_LOSS_SHRINK, "shrink"}};
constexpr Names<StragglerPolicy> kStragglers = {{STRAGGLERS_REPORT, "report"},
                                                {STRAGGLERS_REPLACE, "replace"},
                                                {STRAGGLERS_REBALANCE, "rebalance"}};

template <typename Enum>
std::optional<Enum> Parse(Names<Enum> names, absl::string_view text) {
  for (const auto& [value, name] : names) {
    if (name == text) return value;
  }
  return std::nullopt;
}

template <typename Enum>
std::string Text(Names<Enum> names, Enum value) {
  for (const auto& [v, name] : names) {
    if (v == value) return std::string(name);
  }
  return "unspecified";
}

}  // namespace

std::optional<PipelineSchedule> ParseSchedule(absl::string_view text) {
  return Parse(kSchedules, text);
}
std::string ScheduleText(PipelineSchedule schedule) { return Text(kSchedules, schedule); }

pipeline::ScheduleKind ScheduleKindOf(PipelineSchedule schedule) {
  switch (schedule) {
    case SCHEDULE_GPIPE:
      return pipeline::ScheduleKind::kGpipe;
    case SCHEDULE_INTERLEAVED:
      return pipeline::ScheduleKind::kInterleaved;
    case SCHEDULE_ZB_H1:
      return pipeline::ScheduleKind::kZeroBubbleH1;
    default:
      return pipeline::ScheduleKind::kOneFOneB;
  }
}

std::optional<JobDevice> ParseDevice(absl::string_view text) { return Parse(kDevices, text); }
std::string DeviceText(JobDevice device) { return Text(kDevices, device); }

bool DeviceFits(JobDevice job, JobDevice worker) {
  return job != DEVICE_CPU && job != DEVICE_CUDA ? true : job == worker;
}

std::optional<MatmulPrecision> ParseMatmulPrecision(absl::string_view text) {
  return Parse(kPrecisions, text);
}
std::string MatmulPrecisionText(MatmulPrecision precision) { return Text(kPrecisions, precision); }

std::optional<WorkerLossPolicy> ParseWorkerLossPolicy(absl::string_view text) {
  return Parse(kWorkerLoss, text);
}
std::optional<StragglerPolicy> ParseStragglerPolicy(absl::string_view text) {
  return Parse(kStragglers, text);
}

PipelineSchedule PlannedSchedule(const JobSpec& planned) {
  return ParseSchedule(planned.parallel().schedule()).value_or(SCHEDULE_1F1B);
}
JobDevice PlannedDevice(const JobSpec& planned) {
  return ParseDevice(planned.device()).value_or(DEVICE_AUTO);
}
WorkerLossPolicy PlannedWorkerLossPolicy(const JobSpec& planned) {
  return ParseWorkerLossPolicy(planned.fault_tolerance().on_worker_loss())
      .value_or(WORKER_LOSS_SHRINK);
}
StragglerPolicy PlannedStragglerPolicy(const JobSpec& planned) {
  return ParseStragglerPolicy(planned.stragglers().policy()).value_or(STRAGGLERS_REPORT);
}

MatmulPrecision PlannedMatmulPrecision(const JobSpec& planned) {
  return ParseMatmulPrecision(planned.matmul_precision()).value_or(MATMUL_FP32);
}

}  // namespace dtrain::plan
