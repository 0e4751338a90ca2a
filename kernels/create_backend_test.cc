#include "absl/strings/str_cat.h"
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

// The staging test backend: CPU ops, device memory that is not host memory.
TEST(CreateBackend, CpuStaging) {
  auto b = CreateBackend("cpu-staging", 1);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->info().kind, DeviceKind::kCpu);
  EXPECT_THAT((*b)->info().name, HasSubstr("cpu-staging"));
  EXPECT_FALSE((*b)->DeviceMemoryIsHostMemory());
  EXPECT_TRUE((*CreateBackend("cpu", 1))->DeviceMemoryIsHostMemory());
  EXPECT_EQ(CreateBackend("cpu-staging", 1, MatmulPrecision::kBf16).status().code(),
            absl::StatusCode::kInvalidArgument);
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
  EXPECT_THAT(cuda.status().message(),
              ::testing::AnyOf(HasSubstr("no CUDA GPU"), HasSubstr("no CUDA backend")));
  EXPECT_EQ((*automatic)->info().kind, DeviceKind::kCpu);
}

TEST(ParseMatmulPrecision, NamesRoundTrip) {
  for (MatmulPrecision p :
       {MatmulPrecision::kFp32, MatmulPrecision::kTf32, MatmulPrecision::kBf16}) {
    absl::StatusOr<MatmulPrecision> parsed = ParseMatmulPrecision(MatmulPrecisionName(p));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(MatmulPrecisionName(MatmulPrecision::kFp32), "fp32");
  EXPECT_EQ(MatmulPrecisionName(MatmulPrecision::kTf32), "tf32");
  EXPECT_EQ(MatmulPrecisionName(MatmulPrecision::kBf16), "bf16");
}

TEST(ParseMatmulPrecision, UnknownValueIsNamed) {
  for (const char* bad : {"fp16", "", "TF32", "bf16 ", "float32"}) {
    absl::StatusOr<MatmulPrecision> parsed = ParseMatmulPrecision(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr(absl::StrCat("\"", bad, "\"")));
    EXPECT_THAT(parsed.status().message(), HasSubstr("fp32, tf32 or bf16"));
  }
}

TEST(CreateBackend, CpuAcceptsFp32) {
  auto b = CreateBackend("cpu", 1, MatmulPrecision::kFp32);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->info().kind, DeviceKind::kCpu);
}

// The CPU backends compute in fp32: reduced precisions are refused, not silently ignored, at
// creation and when a job asks for one (SetMatmulPrecision).
TEST(CreateBackend, CpuRejectsReducedPrecision) {
  for (MatmulPrecision p : {MatmulPrecision::kTf32, MatmulPrecision::kBf16}) {
    auto b = CreateBackend("cpu", 1, p);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
    EXPECT_THAT(b.status().message(),
                HasSubstr(absl::StrCat("matmul precision ", MatmulPrecisionName(p),
                                       " needs a CUDA device; the backend of cpu (1 thread) "
                                       "computes in fp32")));
    for (const char* device : {"cpu", "cpu-staging"}) {
      std::unique_ptr<Backend> backend = CreateBackend(device, 1).value();
      const absl::Status s = backend->SetMatmulPrecision(p);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("matmul precision ", MatmulPrecisionName(p),
                                                      " needs a CUDA device")));
      EXPECT_TRUE(backend->SetMatmulPrecision(MatmulPrecision::kFp32).ok());
      EXPECT_EQ(backend->matmul_precision(), MatmulPrecision::kFp32);
    }
  }
}

// "auto" without a GPU gives the CPU, which then refuses tf32 and says why it got the CPU.
TEST(CreateBackend, AutoWithoutAGpuRejectsReducedPrecision) {
  auto b = CreateBackend("auto", 1, MatmulPrecision::kTf32);
  if (b.ok()) {
    EXPECT_EQ((*b)->info().kind, DeviceKind::kCuda);
    GTEST_SKIP() << "a GPU is present: " << (*b)->info().name;
  }
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
  EXPECT_THAT(b.status().message(), HasSubstr("matmul precision tf32 needs a CUDA device"));
  EXPECT_THAT(b.status().message(), HasSubstr("--device=auto"));
}

// Reduced precisions reach the CUDA backend: without a GPU the error is about the GPU.
TEST(CreateBackend, CudaWithReducedPrecisionFailsOnlyForWantOfAGpu) {
  for (MatmulPrecision p : {MatmulPrecision::kTf32, MatmulPrecision::kBf16}) {
    auto b = CreateBackend("cuda", 0, p);
    if (b.ok()) {
      EXPECT_EQ((*b)->info().kind, DeviceKind::kCuda);
      continue;
    }
    EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
    EXPECT_THAT(b.status().message(),
                ::testing::AnyOf(HasSubstr("no CUDA GPU"), HasSubstr("no CUDA backend")));
  }
}

}  // namespace
}  // namespace dtrain::kernels
