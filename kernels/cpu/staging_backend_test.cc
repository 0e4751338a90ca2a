// The cpu-staging backend is what CI trusts to catch unstaged device memory: its protection must
// be real (a dereference from outside the backend dies), its ops must still compute, and its
// copies must land only through events.
#include "kernels/cpu/staging_backend.h"

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_buffer.h"

namespace dtrain::kernels {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Backend> Staging() { return CreateStagingCpuBackend(1).value(); }

TEST(StagingCpuBackend, ReadingDeviceMemoryFromOutsideTheBackendDies) {
  std::unique_ptr<Backend> b = Staging();
  void* device = b->Allocate(64).value();
  EXPECT_DEATH({ (void)*static_cast<volatile float*>(device); }, "");
  EXPECT_DEATH({ static_cast<volatile float*>(device)[3] = 1.0f; }, "");
  b->Free(device);
}

// Also after an op has run on it, and on an interior pointer: the op works on another view of
// the same pages, and the caller's view never opens.
TEST(StagingCpuBackend, ProtectionHoldsAfterAnOpAndOpsSeeInteriorPointers) {
  std::unique_ptr<Backend> b = Staging();
  auto x = DeviceBuffer<float>::Create(b.get(), 16).value();
  ASSERT_TRUE(x.CopyFrom(std::vector<float>(16, 2.0f)).ok());
  ASSERT_TRUE(b->Scale(x.data(), 3.0f, 16).ok());
  ASSERT_TRUE(b->Scale(x.data() + 4, 0.5f, 8).ok());
  EXPECT_DEATH({ (void)*static_cast<volatile float*>(x.data() + 5); }, "");
  std::vector<float> want(16, 6.0f);
  for (int i = 4; i < 12; ++i) want[i] = 3.0f;
  EXPECT_EQ(x.ToHost().value(), want);
}

TEST(StagingCpuBackend, HostMemoryPassedAsDeviceMemoryIsNamed) {
  std::unique_ptr<Backend> b = Staging();
  std::vector<float> host(16, 1.0f);
  absl::Status s = b->Scale(host.data(), 2.0f, 16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Scale: pointer"));
  EXPECT_THAT(s.message(), HasSubstr("is not device memory"));
  auto d = DeviceBuffer<float>::Create(b.get(), 16).value();
  EXPECT_THAT(b->CopyOnDevice(d.data(), host.data(), 64).message(),
              HasSubstr("CopyOnDevice: pointer"));
  EXPECT_THAT(b->CopyToHost(d.data(), d.data(), 64).message(), HasSubstr("is device memory"));
}

TEST(StagingCpuBackend, OpsComputeAsTheCpuBackend) {
  std::unique_ptr<Backend> b = Staging();
  auto x = DeviceBuffer<float>::Create(b.get(), 4).value();
  ASSERT_TRUE(x.CopyFrom({1, 2, 3, 4}).ok());
  EXPECT_EQ(b->SquaredNorm(x.data(), 4).value(), 30.0);
  auto y = DeviceBuffer<float>::Create(b.get(), 4).value();
  ASSERT_TRUE(b->ResidualForward(y.data(), x.data(), x.data(), 4).ok());
  EXPECT_EQ(y.ToHost().value(), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_TRUE(b->Zero(y.data() + 2, 8).ok());  // an interior pointer
  EXPECT_EQ(y.ToHost().value(), (std::vector<float>{2, 4, 0, 0}));
}

// D2H after the producing op, H2D back, each visible once its copy-stream event completed.
TEST(StagingCpuBackend, AsyncCopiesLandAfterTheirEvents) {
  std::unique_ptr<Backend> b = Staging();
  const int n = 1 << 16;
  auto x = DeviceBuffer<float>::Create(b.get(), n).value();
  ASSERT_TRUE(x.CopyFrom(std::vector<float>(n, 1.5f)).ok());
  float* pinned = static_cast<float*>(b->AllocatePinned(n * sizeof(float)).value());
  auto produced = b->CreateEvent().value();
  auto copied = b->CreateEvent().value();
  ASSERT_TRUE(b->Scale(x.data(), 2.0f, n).ok());
  ASSERT_TRUE(b->RecordEvent(*produced, Stream::kCompute).ok());
  ASSERT_TRUE(b->StreamWaitEvent(Stream::kCopy, *produced).ok());
  ASSERT_TRUE(b->CopyToHostAsync(pinned, x.data(), n * sizeof(float)).ok());
  ASSERT_TRUE(b->RecordEvent(*copied, Stream::kCopy).ok());
  ASSERT_TRUE(b->SynchronizeEvent(*copied).ok());
  EXPECT_EQ(pinned[0], 3.0f);
  EXPECT_EQ(pinned[n - 1], 3.0f);

  for (int i = 0; i < n; ++i) pinned[i] = static_cast<float>(i);
  ASSERT_TRUE(b->CopyToDeviceAsync(x.data(), pinned, n * sizeof(float)).ok());
  ASSERT_TRUE(b->RecordEvent(*copied, Stream::kCopy).ok());
  ASSERT_TRUE(b->StreamWaitEvent(Stream::kCompute, *copied).ok());
  EXPECT_EQ(b->SquaredNorm(x.data(), 3).value(), 5.0);
  b->FreePinned(pinned);
}

TEST(StagingCpuBackend, AsyncCopiesNeedPinnedHostMemoryAndDeviceMemory) {
  std::unique_ptr<Backend> b = Staging();
  auto x = DeviceBuffer<float>::Create(b.get(), 16).value();
  std::vector<float> pageable(16);
  EXPECT_THAT(b->CopyToHostAsync(pageable.data(), x.data(), 64).message(),
              HasSubstr("is not inside memory from AllocatePinned"));
  void* pinned = b->AllocatePinned(64).value();
  EXPECT_THAT(b->CopyToDeviceAsync(pageable.data(), pinned, 64).message(),
              HasSubstr("is not device memory"));
  EXPECT_THAT(b->CopyToHostAsync(pinned, x.data(), 128).message(),
              HasSubstr("not inside memory from AllocatePinned"));
  b->FreePinned(pinned);
}

// Memory the caller allocated (the dp group's shared segment) serves as pinned memory between
// RegisterPinned and UnregisterPinned, and only inside the registered range.
TEST(StagingCpuBackend, RegisteredHostMemoryIsPinnedUntilUnregistered) {
  std::unique_ptr<Backend> b = Staging();
  auto x = DeviceBuffer<float>::Create(b.get(), 16).value();
  std::vector<float> host(32, 1.0f);
  ASSERT_TRUE(b->RegisterPinned(host.data(), 16 * sizeof(float)).ok());
  ASSERT_TRUE(b->CopyToDeviceAsync(x.data(), host.data(), 16 * sizeof(float)).ok());
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_EQ(b->SquaredNorm(x.data(), 16).value(), 16.0);
  EXPECT_THAT(b->CopyToHostAsync(host.data() + 8, x.data(), 16 * sizeof(float)).message(),
              HasSubstr("not inside memory from AllocatePinned or RegisterPinned"));
  b->UnregisterPinned(host.data());
  EXPECT_THAT(b->CopyToHostAsync(host.data(), x.data(), 16 * sizeof(float)).message(),
              HasSubstr("not inside memory from AllocatePinned or RegisterPinned"));
}

// Ops on several threads at once compute, and while they run the caller's view stays closed:
// a dereference from outside dies even in the middle of an op on the same allocation.
TEST(StagingCpuBackend, DeviceMemoryStaysClosedWhileOpsRunOnOtherThreads) {
  std::unique_ptr<Backend> b = Staging();
  const int n = 1 << 12;
  auto x = DeviceBuffer<float>::Create(b.get(), n).value();
  ASSERT_TRUE(x.CopyFrom(std::vector<float>(n, 1.0f)).ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) EXPECT_EQ(b->SquaredNorm(x.data(), n).value(), n);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_DEATH(
      {
        std::atomic<bool> stop{false};
        std::thread op([&] {
          while (!stop) (void)b->SquaredNorm(x.data(), n);
        });
        absl::SleepFor(absl::Milliseconds(5));
        (void)*static_cast<volatile float*>(x.data() + 7);
        stop = true;
        op.join();
      },
      "");
  EXPECT_TRUE(b->Synchronize().ok());
}

}  // namespace
}  // namespace dtrain::kernels
