// What of the CUDA backend runs without a GPU: error conversion, backend creation's errors, and
// the launchers' argument checks, which all return before the first CUDA call. The kernels
// themselves are tested against the CPU backend by //kernels/tests:ops_test on a GPU host.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/residual.cuh"

namespace dtrain::kernels {
namespace {

using ::testing::HasSubstr;

absl::Status FailingCudaCall() {
  CUDA_RETURN_IF_ERROR(cudaErrorMemoryAllocation);
  return absl::OkStatus();
}

absl::Status FailingCublasCall() {
  CUBLAS_RETURN_IF_ERROR(CUBLAS_STATUS_INVALID_VALUE);
  return absl::OkStatus();
}

TEST(CudaCheck, CeilDivRoundsUp) {
  EXPECT_EQ(cuda::CeilDiv(0, 256), 0);
  EXPECT_EQ(cuda::CeilDiv(1, 256), 1);
  EXPECT_EQ(cuda::CeilDiv(256, 256), 1);
  EXPECT_EQ(cuda::CeilDiv(257, 256), 2);
  EXPECT_EQ(cuda::CeilDiv(int64_t{1} << 40, 256), int64_t{1} << 32);
}

TEST(CudaCheck, CudaErrorNamesTheExpressionAndTheError) {
  const absl::Status status = FailingCudaCall();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("cudaErrorMemoryAllocation failed"));
  EXPECT_THAT(status.message(), HasSubstr("cudaErrorMemoryAllocation ("));
  EXPECT_THAT(status.message(), HasSubstr("cuda_backend_test.cc"));
}

// Whether a library whose file name contains `name` is mapped into this process.
bool Mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

// cuBLAS is not loaded when the process starts (cublas_library.h: about 0.5 s of CPU in every
// process that linked it), but by the first LoadCublas; errors before that give the status's
// number, after it its name and description. Runs without a GPU: loading the library needs none.
TEST(CublasLibrary, LoadedOnFirstUseNotAtStartAndItsErrorsNamed) {
  ASSERT_EQ(cuda::LoadedCublas(), nullptr) << "a test before this one loaded cuBLAS";
  EXPECT_FALSE(Mapped("/libcublas.so")) << "libcublas was loaded when the process started";
  EXPECT_FALSE(Mapped("/libcublasLt.so"));
  absl::Status status = FailingCublasCall();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("CUBLAS_STATUS_INVALID_VALUE failed: cuBLAS status 7 ["));

  absl::StatusOr<const cuda::CublasLibrary*> cublas = cuda::LoadCublas();
  ASSERT_TRUE(cublas.ok()) << cublas.status();
  EXPECT_TRUE(Mapped(absl::StrCat("/", cuda::CublasLibraryName())));
  EXPECT_EQ(cuda::LoadedCublas(), *cublas);
  EXPECT_EQ(*cuda::LoadCublas(), *cublas);  // once
  EXPECT_STREQ((*cublas)->GetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  status = FailingCublasCall();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("CUBLAS_STATUS_INVALID_VALUE failed"));
  EXPECT_THAT(status.message(), HasSubstr("CUBLAS_STATUS_INVALID_VALUE ("));
}

TEST(CudaBackend, CreationErrorsNameTheProblem) {
  const int count = CudaDeviceCount();  // 0 without driver or GPU; must not abort
  ASSERT_GE(count, 0);
  if (count == 0) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(0);
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(backend.status().message(),
                HasSubstr("no CUDA GPU found: cudaGetDeviceCount returned"));
    return;
  }
  for (int ordinal : {-1, count}) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(ordinal);
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument) << ordinal;
    EXPECT_THAT(backend.status().message(), HasSubstr(absl::StrCat("has ", count, " CUDA GPU")));
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->info().kind, DeviceKind::kCuda);
  EXPECT_FALSE((*backend)->info().name.empty());
  EXPECT_GT((*backend)->info().memory_bytes, 0);
}

// The checks come before any CUDA call, so they run without a GPU (stream 0, no cuBLAS handle).
// The pointers are never dereferenced.
TEST(CudaLaunchers, RejectBadArgumentsWithInvalidArgumentNamingOpAndArgument) {
  float dummy[4] = {};
  int32_t tokens[4] = {};
  double result[2] = {};
  float* p = dummy;
  const cuda::GemmContext gemm;
  AdamWParams step0;
  step0.step = 0;
  struct Call {
    const char* op;
    const char* arg;
    absl::Status status;
  };
  const Call calls[] = {
      {"Gemm", "lda", cuda::Gemm(gemm, false, false, 4, 3, 5, 1, p, 4, p, 3, 0, p, 3)},
      {"Gemm", "m", cuda::Gemm(gemm, false, false, -1, 3, 5, 1, p, 5, p, 3, 0, p, 3)},
      {"EmbeddingForward", "tokens", cuda::EmbeddingForward(p, nullptr, p, p, 1, 2, 4, 0)},
      {"EmbeddingBackward", "B", cuda::EmbeddingBackward(p, p, p, tokens, -1, 2, 4, 0)},
      {"LayerNormForward", "C", cuda::LayerNormForward(p, p, p, p, p, p, 2, 0, 0)},
      {"LayerNormBackward", "rstd",
       cuda::LayerNormBackward(p, p, p, p, p, p, p, nullptr, 2, 4, nullptr, 0)},
      {"MatmulForward", "OC", cuda::MatmulForward(gemm, p, p, p, p, 2, 4, -1)},
      {"MatmulBackwardInput", "weight",
       cuda::MatmulBackwardInput(gemm, p, p, nullptr, 2, 4, 4, true)},
      {"MatmulBackwardWeight", "inp",
       cuda::MatmulBackwardWeight(gemm, p, nullptr, p, nullptr, 2, 4, 4)},
      {"GeluForward", "n", cuda::GeluForward(p, p, -1, 0)},
      {"GeluBackward", "inp", cuda::GeluBackward(p, nullptr, p, 4, 0)},
      {"AttentionForward", "NH", cuda::AttentionForward(gemm, p, p, p, 1, 2, 10, 3)},
      {"AttentionBackward", "dqkv", cuda::AttentionBackward(gemm, nullptr, p, p, p, p, 1, 2, 4, 2)},
      {"ResidualForward", "a", cuda::ResidualForward(p, nullptr, p, 4, 0)},
      {"ResidualBackward", "db", cuda::ResidualBackward(p, nullptr, p, 4, 0)},
      {"CrossEntropyForward", "V", cuda::CrossEntropyForward(p, p, p, tokens, 2, 0, 0)},
      {"CrossEntropyBackward", "dlogits",
       cuda::CrossEntropyBackward(nullptr, p, tokens, 1.0f, 2, 4, 0)},
      {"AdamWUpdate", "step", cuda::AdamWUpdate(p, p, p, p, 4, step0, 0)},
      {"SquaredNorm", "x", cuda::SquaredNorm(result, result + 1, nullptr, 4, 0)},
      {"Scale", "n", cuda::Scale(p, 2.0f, -3, 0)},
  };
  for (const Call& call : calls) {
    EXPECT_EQ(call.status.code(), absl::StatusCode::kInvalidArgument)
        << call.op << ": " << call.status;
    EXPECT_THAT(call.status.message(), HasSubstr(absl::StrCat(call.op, ": ")));
    EXPECT_THAT(call.status.message(), HasSubstr(call.arg));
  }
}

TEST(CudaLaunchers, EmptyWorkReturnsBeforeTouchingTheGpu) {
  float dummy[4] = {};
  int32_t tokens[4] = {};
  float* p = dummy;
  const cuda::GemmContext gemm;
  EXPECT_TRUE(cuda::GeluForward(p, p, 0, 0).ok());
  EXPECT_TRUE(cuda::ResidualBackward(p, p, p, 0, 0).ok());
  EXPECT_TRUE(cuda::Gemm(gemm, true, false, 0, 3, 5, 1, p, 1, p, 3, 0, p, 3).ok());
  EXPECT_TRUE(cuda::EmbeddingBackward(p, p, p, tokens, 0, 4, 8, 0).ok());
  EXPECT_TRUE(cuda::LayerNormBackward(p, p, p, p, p, p, p, p, 0, 4, nullptr, 0).ok());
  EXPECT_TRUE(cuda::AttentionForward(gemm, p, p, p, 2, 0, 8, 2).ok());
  EXPECT_TRUE(cuda::CrossEntropyForward(p, p, p, tokens, 0, 4, 0).ok());
  EXPECT_TRUE(cuda::AdamWUpdate(p, p, p, p, 0, AdamWParams(), 0).ok());
}

}  // namespace
}  // namespace dtrain::kernels
