// CreateCpuBackend's contract; the ops themselves are specified by //kernels/tests:ops_test.
#include "kernels/cpu/cpu_backend.h"

#include <omp.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::kernels {
namespace {

using ::testing::HasSubstr;

TEST(CreateCpuBackend, NegativeThreadCountIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(-1);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(backend.status().message(), HasSubstr("num_threads"));
}

TEST(CreateCpuBackend, ZeroThreadsMeansEveryCore) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const int cores = omp_get_num_procs();
  EXPECT_EQ((*backend)->info().name,
            absl::StrCat("cpu (", cores, cores == 1 ? " thread)" : " threads)"));
}

TEST(CreateCpuBackend, InfoDescribesTheHost) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(1);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const DeviceInfo& info = (*backend)->info();
  EXPECT_EQ(info.kind, DeviceKind::kCpu);
  EXPECT_EQ(info.name, "cpu (1 thread)");
  EXPECT_EQ(info.ordinal, 0);
  EXPECT_GT(info.memory_bytes, int64_t{1} << 26);  // physical RAM, at least 64 MiB
}

TEST(CpuBackend, AllocationsAre64ByteAligned) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend(1)).value();
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}}) {
    absl::StatusOr<void*> ptr = backend->Allocate(bytes);
    ASSERT_TRUE(ptr.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*ptr) % 64, 0u) << bytes;
    backend->Free(*ptr);
  }
}

TEST(CpuBackend, MemoryInUseCountsLiveAllocations) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend(1)).value();
  EXPECT_EQ(backend->MemoryInUse().value(), 0);
  void* a = backend->Allocate(1000).value();  // rounded up to 64-byte multiples
  void* b = backend->Allocate(64).value();
  EXPECT_EQ(backend->MemoryInUse().value(), 1024 + 64);
  backend->Free(a);
  EXPECT_EQ(backend->MemoryInUse().value(), 64);
  backend->Free(b);
  EXPECT_EQ(backend->MemoryInUse().value(), 0);
}

TEST(CpuBackend, CopiesRejectNullPointers) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend(1)).value();
  float x = 0;
  EXPECT_EQ(backend->CopyToDevice(nullptr, &x, 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->CopyToHost(&x, nullptr, 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend->CopyOnDevice(nullptr, nullptr, 0).ok());  // nothing to copy
}

}  // namespace
}  // namespace dtrain::kernels
