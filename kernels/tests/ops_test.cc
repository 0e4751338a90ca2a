// The backend-generic op suite: every TEST_P(Ops, ...) in this binary (ops_test.cc and the
// *_test.cc files beside it) runs on each device below. A device this build or machine lacks is
// skipped with the reason (e.g. "cuda": no CUDA toolkit at build time, or no GPU).
//
// The CUDA backend's TF32 and bf16 GEMMs (--matmul_precision) are not instances here: these
// tests hold every op to fp32 tolerances. matmul_precision_test.cc instantiates "cuda_tf32" and
// "cuda_bf16" for GEMM and matmul, with tolerances for their rounding.
//
// This file: instantiation, memory and stream, and argument checking shared by every op.
#include <cstdint>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/tests/ops_test_util.h"

namespace dtrain::kernels::testing {
namespace {

using ::testing::HasSubstr;

INSTANTIATE_TEST_SUITE_P(Devices, Ops,
                         ::testing::Values(DeviceParam{"cpu", "cpu", 0},
                                           DeviceParam{"cpu_3threads", "cpu", 3},
                                           DeviceParam{"cuda", "cuda", 0}),
                         [](const ::testing::TestParamInfo<DeviceParam>& info) {
                           return info.param.test_name;
                         });

TEST_P(Ops, InfoNamesTheDevice) {
  const DeviceInfo& info = backend()->info();
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.memory_bytes, 0);
  EXPECT_EQ(info.kind, IsCpu() ? DeviceKind::kCpu : DeviceKind::kCuda);
}

TEST_P(Ops, AllocateReturnsZeroFilledMemory) {
  for (size_t bytes : {size_t{1}, size_t{4}, size_t{1000}, size_t{1} << 20}) {
    absl::StatusOr<void*> ptr = backend()->Allocate(bytes);
    ASSERT_TRUE(ptr.ok()) << ptr.status();
    std::vector<uint8_t> host(bytes, 0xff);
    ASSERT_TRUE(backend()->CopyToHost(host.data(), *ptr, bytes).ok());
    EXPECT_EQ(host, std::vector<uint8_t>(bytes, 0)) << bytes << " bytes";
    backend()->Free(*ptr);
  }
}

TEST_P(Ops, AllocateZeroBytesGivesDistinctValidPointers) {
  absl::StatusOr<void*> a = backend()->Allocate(0);
  absl::StatusOr<void*> b = backend()->Allocate(0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, nullptr);
  EXPECT_NE(*a, *b);
  backend()->Free(*a);
  backend()->Free(*b);
}

TEST_P(Ops, CopiesRoundTripAndZeroClears) {
  const std::vector<float> host = RandomFloats(1001, 1);
  DeviceBuffer<float> a = Upload(host);
  DeviceBuffer<float> b = Filled(host.size(), 0.0f);
  ASSERT_TRUE(backend()->CopyOnDevice(b.data(), a.data(), a.bytes()).ok());
  EXPECT_EQ(Download(b), host);
  ASSERT_TRUE(backend()->Zero(a.data(), 10 * sizeof(float)).ok());
  std::vector<float> want = host;
  std::fill(want.begin(), want.begin() + 10, 0.0f);
  EXPECT_EQ(Download(a), want);
  EXPECT_TRUE(backend()->Synchronize().ok());
}

// Every op rejects a negative size with InvalidArgument naming the op.
TEST_P(Ops, NegativeSizesAreInvalidArgument) {
  DeviceBuffer<float> f = Filled(64, 0.0f);
  DeviceBuffer<int32_t> i = Filled(64, 0);
  float* p = f.data();
  const int32_t* t = i.data();
  Backend* be = backend();
  const std::vector<std::pair<const char*, absl::Status>> calls = {
      {"Gemm", be->Gemm(false, false, -1, 2, 2, 1, p, 2, p, 2, 0, p, 2)},
      {"EmbeddingForward", be->EmbeddingForward(p, t, p, p, 1, -1, 4)},
      {"EmbeddingBackward", be->EmbeddingBackward(p, p, p, t, -1, 1, 4)},
      {"LayerNormForward", be->LayerNormForward(p, p, p, p, p, p, -2, 4)},
      {"LayerNormBackward", be->LayerNormBackward(p, p, p, p, p, p, p, p, 2, -4)},
      {"MatmulForward", be->MatmulForward(p, p, p, p, 2, -4, 4)},
      {"MatmulBackwardInput", be->MatmulBackwardInput(p, p, p, -2, 4, 4, false)},
      {"MatmulBackwardWeight", be->MatmulBackwardWeight(p, p, p, p, 2, 4, -4)},
      {"GeluForward", be->GeluForward(p, p, -1)},
      {"GeluBackward", be->GeluBackward(p, p, p, -1)},
      {"AttentionForward", be->AttentionForward(p, p, p, 1, -2, 4, 2)},
      {"AttentionBackward", be->AttentionBackward(p, p, p, p, p, 1, 2, 4, -2)},
      {"ResidualForward", be->ResidualForward(p, p, p, -1)},
      {"ResidualBackward", be->ResidualBackward(p, p, p, -1)},
      {"CrossEntropyForward", be->CrossEntropyForward(p, p, p, t, -1, 4)},
      {"CrossEntropyBackward", be->CrossEntropyBackward(p, p, t, 1.0f, 1, -4)},
      {"AdamWUpdate", be->AdamWUpdate(p, p, p, p, -1, AdamWParams())},
      {"SquaredNorm", be->SquaredNorm(p, -1).status()},
      {"Scale", be->Scale(p, 2.0f, -1)},
  };
  for (const auto& [op, status] : calls) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << op << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr(op));
  }
}

// Every op rejects a null required pointer with InvalidArgument naming the op and the argument.
TEST_P(Ops, NullPointersAreInvalidArgument) {
  DeviceBuffer<float> f = Filled(64, 0.0f);
  DeviceBuffer<int32_t> i = Filled(64, 0);
  float* p = f.data();
  const int32_t* t = i.data();
  Backend* be = backend();
  struct Call {
    const char* op;
    const char* arg;
    absl::Status status;
  };
  const std::vector<Call> calls = {
      {"Gemm", "c", be->Gemm(false, false, 2, 2, 2, 1, p, 2, p, 2, 0, nullptr, 2)},
      {"EmbeddingForward", "tokens", be->EmbeddingForward(p, nullptr, p, p, 1, 2, 4)},
      {"EmbeddingBackward", "dwpe", be->EmbeddingBackward(p, nullptr, p, t, 1, 2, 4)},
      {"LayerNormForward", "rstd", be->LayerNormForward(p, p, nullptr, p, p, p, 2, 4)},
      {"LayerNormBackward", "dbias", be->LayerNormBackward(p, p, nullptr, p, p, p, p, p, 2, 4)},
      {"MatmulForward", "weight", be->MatmulForward(p, p, nullptr, p, 2, 4, 4)},
      {"MatmulBackwardInput", "dout", be->MatmulBackwardInput(p, nullptr, p, 2, 4, 4, false)},
      {"MatmulBackwardWeight", "dweight", be->MatmulBackwardWeight(nullptr, p, p, p, 2, 4, 4)},
      {"GeluForward", "out", be->GeluForward(nullptr, p, 4)},
      {"GeluBackward", "dout", be->GeluBackward(p, p, nullptr, 4)},
      {"AttentionForward", "att", be->AttentionForward(p, nullptr, p, 1, 2, 4, 2)},
      {"AttentionBackward", "scratch", be->AttentionBackward(p, nullptr, p, p, p, 1, 2, 4, 2)},
      {"ResidualForward", "b", be->ResidualForward(p, p, nullptr, 4)},
      {"ResidualBackward", "da", be->ResidualBackward(nullptr, p, p, 4)},
      {"CrossEntropyForward", "targets", be->CrossEntropyForward(p, p, p, nullptr, 2, 4)},
      {"CrossEntropyBackward", "probs", be->CrossEntropyBackward(p, nullptr, t, 1.0f, 2, 4)},
      {"AdamWUpdate", "grads", be->AdamWUpdate(p, nullptr, p, p, 4, AdamWParams())},
      {"SquaredNorm", "x", be->SquaredNorm(nullptr, 4).status()},
      {"Scale", "x", be->Scale(nullptr, 2.0f, 4)},
  };
  for (const Call& call : calls) {
    EXPECT_EQ(call.status.code(), absl::StatusCode::kInvalidArgument)
        << call.op << ": " << call.status;
    EXPECT_THAT(call.status.message(), HasSubstr(call.op));
    EXPECT_THAT(call.status.message(), HasSubstr(call.arg));
  }
}

TEST_P(Ops, AttentionRejectsChannelsNotDivisibleByHeads) {
  DeviceBuffer<float> f = Filled(1024, 0.0f);
  absl::Status status = backend()->AttentionForward(f.data(), f.data(), f.data(), 1, 2, 10, 3);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("NH"));
}

TEST_P(Ops, ZeroElementOpsAreNoOps) {
  DeviceBuffer<float> f = Filled(4, 7.0f);
  float* p = f.data();
  EXPECT_TRUE(backend()->GeluForward(p, p, 0).ok());
  EXPECT_TRUE(backend()->ResidualForward(p, p, p, 0).ok());
  EXPECT_TRUE(backend()->Scale(p, 0.0f, 0).ok());
  EXPECT_TRUE(backend()->AdamWUpdate(p, p, p, p, 0, AdamWParams()).ok());
  absl::StatusOr<double> norm = backend()->SquaredNorm(p, 0);
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(*norm, 0.0);
  EXPECT_EQ(Download(f), std::vector<float>(4, 7.0f));
}

}  // namespace
}  // namespace dtrain::kernels::testing
