#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace dtrain::kernels {
namespace {

using ::testing::HasSubstr;

TEST(CreateBackend, CpuWithThreads) {
  auto b = CreateBackend("cpu", 2);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->info().kind, DeviceKind::kCpu);
  EXPECT_THAT((*b)->info().name, HasSubstr("2 threads"));
}

TEST(CreateBackend, UnknownDeviceIsNamed) {
  auto b = CreateBackend("tpu");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("unknown device \"tpu\""));
  EXPECT_THAT(CreateBackend("cuda:x").status().message(), HasSubstr("cuda:N"));
}

// On a machine without a GPU (or a build without CUDA), asking for CUDA fails with a message
// saying why, and "auto" falls back to the CPU. With a GPU, both give the GPU.
TEST(CreateBackend, CudaWithoutAGpuFailsClearlyAndAutoPicksTheCpu) {
  auto cuda = CreateBackend("cuda");
  auto automatic = CreateBackend("auto");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  if (cuda.ok()) {
    EXPECT_EQ((*automatic)->info().kind, DeviceKind::kCuda);
    GTEST_SKIP() << "a GPU is present: " << (*cuda)->info().name;
  }
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition) << cuda.status();
  EXPECT_THAT(cuda.status().message(), ::testing::AnyOf(HasSubstr("no CUDA GPU"),
                                                        HasSubstr("no CUDA backend")));
  EXPECT_EQ((*automatic)->info().kind, DeviceKind::kCpu);
}

}  // namespace
}  // namespace dtrain::kernels
