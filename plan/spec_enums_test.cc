#include "plan/spec_enums.h"

#include "gtest/gtest.h"

namespace dtrain::plan {
namespace {

TEST(SpecEnums, EveryScheduleTextRoundTrips) {
  for (const char* text : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
    const std::optional<PipelineSchedule> s = ParseSchedule(text);
    ASSERT_TRUE(s.has_value()) << text;
    EXPECT_EQ(ScheduleText(*s), text);
    // The executor's names are the spec's (plan/schedule.h).
    EXPECT_EQ(pipeline::ScheduleName(ScheduleKindOf(*s)), text);
  }
  EXPECT_FALSE(ParseSchedule("").has_value());
  EXPECT_FALSE(ParseSchedule("1F1B").has_value());
  EXPECT_FALSE(ParseSchedule("zb-h2").has_value());
}

TEST(SpecEnums, DeviceIsCpuCudaOrAutoOnly) {
  EXPECT_EQ(ParseDevice("cpu"), DEVICE_CPU);
  EXPECT_EQ(ParseDevice("cuda"), DEVICE_CUDA);
  EXPECT_EQ(ParseDevice("auto"), DEVICE_AUTO);
  EXPECT_FALSE(ParseDevice("cuda:0").has_value());  // a worker's --device, not a job's
  EXPECT_FALSE(ParseDevice("").has_value());
  EXPECT_EQ(DeviceText(DEVICE_CUDA), "cuda");
}

TEST(SpecEnums, AutoFitsEveryWorkerAndAKindOnlyItsOwn) {
  for (JobDevice worker : {DEVICE_CPU, DEVICE_CUDA}) {
    EXPECT_TRUE(DeviceFits(DEVICE_AUTO, worker));
    EXPECT_TRUE(DeviceFits(JOB_DEVICE_UNSPECIFIED, worker));
    EXPECT_EQ(DeviceFits(DEVICE_CPU, worker), worker == DEVICE_CPU);
    EXPECT_EQ(DeviceFits(DEVICE_CUDA, worker), worker == DEVICE_CUDA);
  }
}

TEST(SpecEnums, PoliciesParseTheirTextsOnly) {
  EXPECT_EQ(ParseWorkerLossPolicy("wait"), WORKER_LOSS_WAIT);
  EXPECT_EQ(ParseWorkerLossPolicy("shrink"), WORKER_LOSS_SHRINK);
  EXPECT_FALSE(ParseWorkerLossPolicy("fail").has_value());
  EXPECT_EQ(ParseStragglerPolicy("report"), STRAGGLERS_REPORT);
  EXPECT_EQ(ParseStragglerPolicy("replace"), STRAGGLERS_REPLACE);
  EXPECT_EQ(ParseStragglerPolicy("rebalance"), STRAGGLERS_REBALANCE);
  EXPECT_FALSE(ParseStragglerPolicy("Replace").has_value());
}

TEST(SpecEnums, APlannedSpecsUnparsedFieldReadsAsThePlansDefault) {
  JobSpec spec;
  EXPECT_EQ(PlannedSchedule(spec), SCHEDULE_1F1B);
  EXPECT_EQ(PlannedDevice(spec), DEVICE_AUTO);
  EXPECT_EQ(PlannedWorkerLossPolicy(spec), WORKER_LOSS_SHRINK);
  EXPECT_EQ(PlannedStragglerPolicy(spec), STRAGGLERS_REPORT);
  spec.mutable_parallel()->set_schedule("zb-h1");
  spec.set_device("cuda");
  spec.mutable_fault_tolerance()->set_on_worker_loss("wait");
  spec.mutable_stragglers()->set_policy("rebalance");
  EXPECT_EQ(PlannedSchedule(spec), SCHEDULE_ZB_H1);
  EXPECT_EQ(PlannedDevice(spec), DEVICE_CUDA);
  EXPECT_EQ(PlannedWorkerLossPolicy(spec), WORKER_LOSS_WAIT);
  EXPECT_EQ(PlannedStragglerPolicy(spec), STRAGGLERS_REBALANCE);
}

TEST(SpecEnums, MatmulPrecisionTextAndDefault) {
  EXPECT_EQ(ParseMatmulPrecision("fp32"), MATMUL_FP32);
  EXPECT_EQ(ParseMatmulPrecision("tf32"), MATMUL_TF32);
  EXPECT_EQ(ParseMatmulPrecision("bf16"), MATMUL_BF16);
  EXPECT_FALSE(ParseMatmulPrecision("BF16").has_value());
  EXPECT_EQ(MatmulPrecisionText(MATMUL_BF16), "bf16");
  JobSpec stored;  // a spec a coordinator stored before the field: fp32, as it trained
  EXPECT_EQ(PlannedMatmulPrecision(stored), MATMUL_FP32);
}

}  // namespace
}  // namespace dtrain::plan
