#include "worker/parallel/device_staging.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::parallel {
namespace {

using kernels::Stream;

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StagedTensor& StagedTensor::operator=(StagedTensor&& other) noexcept {
  if (this != &other) {
    if (pool_ != nullptr) pool_->Release(buffer_, capacity_);
    pool_ = std::exchange(other.pool_, nullptr);
    buffer_ = std::exchange(other.buffer_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    host_ = std::exchange(other.host_, {});
  }
  return *this;
}

StagedTensor::~StagedTensor() {
  if (pool_ != nullptr) pool_->Release(buffer_, capacity_);
}

absl::StatusOr<std::unique_ptr<DeviceStaging>> DeviceStaging::Create(kernels::Backend* backend,
                                                                     int64_t chunk_floats) {
  if (chunk_floats <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("staging chunk of ", chunk_floats, " floats: must be positive"));
  }
  return std::unique_ptr<DeviceStaging>(new DeviceStaging(backend, chunk_floats));
}

DeviceStaging::~DeviceStaging() {
  absl::MutexLock lock(&mu_);
  for (float* buffer : all_) backend_->FreePinned(buffer);
}

absl::StatusOr<StagedTensor> DeviceStaging::Acquire(int64_t n) {
  StagedTensor t;
  {
    absl::MutexLock lock(&mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= n && (best == free_.end() || it->second < best->second)) best = it;
    }
    if (best != free_.end()) {
      t.buffer_ = best->first;
      t.capacity_ = best->second;
      free_.erase(best);
    }
  }
  if (t.buffer_ == nullptr) {
    const int64_t capacity = std::max(n, chunk_floats_);
    ASSIGN_OR_RETURN(void* buffer, backend_->AllocatePinned(capacity * sizeof(float)));
    t.buffer_ = static_cast<float*>(buffer);
    t.capacity_ = capacity;
    absl::MutexLock lock(&mu_);
    all_.push_back(t.buffer_);
  }
  t.pool_ = this;
  t.host_ = absl::MakeSpan(t.buffer_, n);
  return t;
}

void DeviceStaging::Release(float* buffer, int64_t capacity) {
  absl::MutexLock lock(&mu_);
  free_.emplace_back(buffer, capacity);
}

absl::StatusOr<std::unique_ptr<kernels::Event>> DeviceStaging::Record(Stream stream) {
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Event> event, backend_->CreateEvent());
  RETURN_IF_ERROR(backend_->RecordEvent(*event, stream));
  return event;
}

absl::StatusOr<StagedTensor> DeviceStaging::ToHost(const float* data, int64_t n) {
  StagedTensor t;
  if (!copies_) {
    t.host_ = absl::MakeSpan(const_cast<float*>(data), n);  // the CPU backend: device == host
    return t;
  }
  ASSIGN_OR_RETURN(t, Acquire(n));
  ASSIGN_OR_RETURN(auto produced, Record(Stream::kCompute));
  RETURN_IF_ERROR(backend_->StreamWaitEvent(Stream::kCopy, *produced));
  RETURN_IF_ERROR(backend_->CopyToHostAsync(t.buffer_, data, n * sizeof(float)));
  ASSIGN_OR_RETURN(auto landed, Record(Stream::kCopy));
  const auto wait = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(backend_->SynchronizeEvent(*landed));
  absl::MutexLock lock(&mu_);
  stats_.bytes_to_host += n * int64_t{sizeof(float)};
  stats_.wait_seconds += Since(wait);
  return t;
}

absl::StatusOr<StagedTensor> DeviceStaging::ReceiveBuffer(float* device, int64_t n) {
  if (copies_) return Acquire(n);
  StagedTensor t;
  t.host_ = absl::MakeSpan(device, n);
  return t;
}

absl::Status DeviceStaging::ToDevice(float* device, const StagedTensor& host) {
  if (!copies_) return absl::OkStatus();
  const int64_t n = static_cast<int64_t>(host.host().size());
  // The copy overwrites `device` only after the compute that may still read its old contents.
  ASSIGN_OR_RETURN(auto consumed, Record(Stream::kCompute));
  RETURN_IF_ERROR(backend_->StreamWaitEvent(Stream::kCopy, *consumed));
  RETURN_IF_ERROR(backend_->CopyToDeviceAsync(device, host.host().data(), n * sizeof(float)));
  ASSIGN_OR_RETURN(auto landed, Record(Stream::kCopy));
  RETURN_IF_ERROR(backend_->StreamWaitEvent(Stream::kCompute, *landed));
  const auto wait = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(backend_->SynchronizeEvent(*landed));  // `host` is free again
  absl::MutexLock lock(&mu_);
  stats_.bytes_to_device += n * int64_t{sizeof(float)};
  stats_.wait_seconds += Since(wait);
  return absl::OkStatus();
}

absl::Status DeviceStaging::OnHost(float* data, int64_t n, bool chunked,
                                   const std::function<absl::Status(absl::Span<float>)>& on_host) {
  return Stage(data, n, /*host_dst=*/nullptr, chunked, on_host);
}

absl::Status DeviceStaging::OnHostIn(
    float* data, int64_t n, float* host, bool chunked,
    const std::function<absl::Status(absl::Span<float>)>& on_host) {
  return Stage(data, n, host, chunked, on_host);
}

absl::Status DeviceStaging::Stage(float* data, int64_t n, float* host_dst, bool chunked,
                                  const std::function<absl::Status(absl::Span<float>)>& on_host) {
  const int64_t chunk = chunked ? chunk_floats_ : std::max<int64_t>(n, 1);
  const int64_t count = (n + chunk - 1) / chunk;
  if (n == 0) return on_host(absl::MakeSpan(data, 0));
  if (!copies_) {
    // The same chunks as with copies, so CPU and GPU ranks run the same collectives.
    for (int64_t begin = 0; begin < n; begin += chunk) {
      RETURN_IF_ERROR(on_host(absl::MakeSpan(data + begin, std::min(chunk, n - begin))));
    }
    return absl::OkStatus();
  }
  // Chunk i's host copy: a pool buffer, or [begin, begin + size) of host_dst.
  std::vector<StagedTensor> pooled(host_dst == nullptr ? count : 0);
  std::vector<absl::Span<float>> host(count);
  std::vector<std::unique_ptr<kernels::Event>> landed(count);
  double waited = 0, overlapped = 0;
  // Every chunk's copy to the host is enqueued first: chunk i's collective waits for chunk i
  // only, while the copy stream goes on with the next ones.
  auto run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto produced, Record(Stream::kCompute));
    RETURN_IF_ERROR(backend_->StreamWaitEvent(Stream::kCopy, *produced));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t begin = i * chunk, size = std::min(chunk, n - begin);
      if (host_dst == nullptr) {
        ASSIGN_OR_RETURN(pooled[i], Acquire(size));
        host[i] = pooled[i].host();
      } else {
        host[i] = absl::MakeSpan(host_dst + begin, size);
      }
      RETURN_IF_ERROR(
          backend_->CopyToHostAsync(host[i].data(), data + begin, size * sizeof(float)));
      ASSIGN_OR_RETURN(landed[i], Record(Stream::kCopy));
    }
    for (int64_t i = 0; i < count; ++i) {
      const int64_t begin = i * chunk;
      const auto wait = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(backend_->SynchronizeEvent(*landed[i]));
      waited += Since(wait);
      const auto start = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(on_host(host[i]));
      if (i + 1 < count) overlapped += Since(start);  // chunk i+1's copy ran meanwhile
      RETURN_IF_ERROR(backend_->CopyToDeviceAsync(data + begin, host[i].data(),
                                                  host[i].size() * sizeof(float)));
    }
    ASSIGN_OR_RETURN(auto back, Record(Stream::kCopy));
    RETURN_IF_ERROR(backend_->StreamWaitEvent(Stream::kCompute, *back));
    const auto wait = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(backend_->SynchronizeEvent(*back));  // the pinned buffers are free again
    waited += Since(wait);
    return absl::OkStatus();
  };
  absl::Status s = run();
  // The copy stream may still hold copies into or out of `host`: they finish before the
  // buffers go back to the pool (or host_dst is used again).
  if (!s.ok()) (void)backend_->Synchronize();
  absl::MutexLock lock(&mu_);
  stats_.bytes_to_host += n * int64_t{sizeof(float)};
  stats_.bytes_to_device += n * int64_t{sizeof(float)};
  stats_.wait_seconds += waited;
  stats_.overlapped_seconds += overlapped;
  return s;
}

StagingStats DeviceStaging::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void DeviceStaging::ResetStats() {
  absl::MutexLock lock(&mu_);
  stats_ = StagingStats();
}

}  // namespace dtrain::parallel
