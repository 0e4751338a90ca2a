// DeviceBuffer<T>: owning handle to `size` elements of T in a Backend's memory (or, Borrow, a
// view of memory someone else owns).
//
//   ASSIGN_OR_RETURN(auto logits, DeviceBuffer<float>::Create(backend, N * V));
//   RETURN_IF_ERROR(backend->MatmulForward(logits.data(), ...));
#ifndef DTRAIN_KERNELS_DEVICE_BUFFER_H_
#define DTRAIN_KERNELS_DEVICE_BUFFER_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/backend.h"

namespace dtrain::kernels {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Zero-filled buffer of `size` elements.
  static absl::StatusOr<DeviceBuffer> Create(Backend* backend, size_t size) {
    ASSIGN_OR_RETURN(void* ptr, backend->Allocate(size * sizeof(T)));
    return DeviceBuffer(backend, static_cast<T*>(ptr), size);
  }
  // A view of `size` elements at `data`, which the caller owns and keeps alive (never freed
  // here): memory the backend can use as its own, e.g. host memory shared with other processes
  // on a backend whose device memory is host memory (Backend::DeviceMemoryIsHostMemory).
  static DeviceBuffer Borrow(Backend* backend, T* data, size_t size) {
    DeviceBuffer b(backend, data, size);
    b.owned_ = false;
    return b;
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      std::swap(backend_, other.backend_);
      std::swap(data_, other.data_);
      std::swap(size_, other.size_);
      std::swap(owned_, other.owned_);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

  absl::Status CopyFrom(absl::Span<const T> host) {
    if (host.size() != size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy of ", host.size(), " elements into a buffer of ", size_));
    }
    return backend_->CopyToDevice(data_, host.data(), bytes());
  }
  absl::StatusOr<std::vector<T>> ToHost() const {
    std::vector<T> host(size_);
    RETURN_IF_ERROR(backend_->CopyToHost(host.data(), data_, bytes()));
    return host;
  }
  absl::Status SetZero() { return backend_->Zero(data_, bytes()); }

 private:
  DeviceBuffer(Backend* backend, T* data, size_t size)
      : backend_(backend), data_(data), size_(size) {}
  void Reset() {
    if (backend_ != nullptr && data_ != nullptr && owned_) backend_->Free(data_);
    backend_ = nullptr;
    owned_ = true;
    data_ = nullptr;
    size_ = 0;
  }

  Backend* backend_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
  bool owned_ = true;
};

}  // namespace dtrain::kernels

#endif  // DTRAIN_KERNELS_DEVICE_BUFFER_H_
