// DeviceStaging: how a rank's device tensors reach the transport and come back. What a rank sends
// (activations, input gradients, collective chunks) is copied device-to-host into pooled pinned
// buffers on the backend's copy stream, after an event recorded behind the kernels that produced
// it, and handed to the transport once its copy-stream event completed; what it receives is
// copied host-to-device on the copy stream, and the compute stream waits on that copy's event
// before the kernels that read it.
//
// On the CPU backend (Backend::DeviceMemoryIsHostMemory) nothing is copied: the transport reads
// and writes device memory directly, as before staging existed.
//
// Collectives run on the host (OnHost): the transport's collectives reduce each chunk as it
// arrives from a peer (ring steps), in host memory, so a reduction on the device would need a
// copy each way per ring step instead of one per chunk (docs/PERFORMANCE.md "Staging").
// Large spans are cut into chunks of `chunk_floats`: the copy of chunk i+1 runs on the copy
// stream while the collective of chunk i runs on the calling thread, and chunk i's copy back
// while chunk i+1's collective runs.
//
// Thread-safe: the training thread and the gradient sync thread stage at once (one pool, one
// mutex; events are per call).
//
//   ASSIGN_OR_RETURN(auto staging, DeviceStaging::Create(backend, 1 << 18));
//   RETURN_IF_ERROR(staging->OnHost(grads, n, /*chunked=*/true, [&](absl::Span<float> host) {
//     return comm::AllReduce(group, host, comm::ReduceOp::kSum);
//   }));
#ifndef DTRAIN_WORKER_PARALLEL_DEVICE_STAGING_H_
#define DTRAIN_WORKER_PARALLEL_DEVICE_STAGING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kernels/backend.h"

namespace dtrain::parallel {

class DeviceStaging;

// A pinned host buffer from the pool, returned to it when destroyed; or, on the CPU backend, a
// view of device memory. `host` is what the transport may read or write.
class StagedTensor {
 public:
  StagedTensor() = default;
  StagedTensor(StagedTensor&& other) noexcept { *this = std::move(other); }
  StagedTensor& operator=(StagedTensor&& other) noexcept;
  ~StagedTensor();
  absl::Span<float> host() const { return host_; }

 private:
  friend class DeviceStaging;
  DeviceStaging* pool_ = nullptr;  // null: a view, nothing to return
  float* buffer_ = nullptr;
  int64_t capacity_ = 0;
  absl::Span<float> host_;
};

// Copies and waits, for the staging cost figures (docs/PERFORMANCE.md "Staging").
struct StagingStats {
  int64_t bytes_to_host = 0, bytes_to_device = 0;
  // Seconds the calling threads waited for copies (device-to-host before a send or a
  // collective chunk, host-to-device before the compute that reads it).
  double wait_seconds = 0;
  // Seconds spent in the collectives of chunked OnHost calls: while they ran, the next chunk's
  // copy could proceed (the overlap the chunking buys).
  double overlapped_seconds = 0;
};

class DeviceStaging {
 public:
  // `chunk_floats` > 0: the chunk of OnHost(chunked=true) and the pool's usual buffer size.
  static absl::StatusOr<std::unique_ptr<DeviceStaging>> Create(kernels::Backend* backend,
                                                               int64_t chunk_floats);
  ~DeviceStaging();

  // False on the CPU backend: nothing is copied.
  bool copies() const { return copies_; }

  // `n` device floats as host memory the transport may read: a pinned copy made after the
  // kernels enqueued so far, returned once it landed (a view of `data` on the CPU backend).
  absl::StatusOr<StagedTensor> ToHost(const float* data, int64_t n);
  // A host buffer of `n` floats to receive into (a view of `device` on the CPU backend, so the
  // receive lands in place), then ToDevice.
  absl::StatusOr<StagedTensor> ReceiveBuffer(float* device, int64_t n);
  // Copies `host` into `device` (nothing on the CPU backend); the compute enqueued after this
  // reads the copy. Returns once the copy landed, so `host` may be reused.
  absl::Status ToDevice(float* device, const StagedTensor& host);
  // Runs `on_host` over device `data` [0, n) as host memory and leaves its result in `data`:
  // in chunks of chunk_floats when `chunked` (on_host must then treat each chunk alone, as an
  // element-wise all-reduce does), else in one call (reduce-scatter, all-gather). The chunks
  // are the same on every backend, so every rank of a job runs the same collectives.
  absl::Status OnHost(float* data, int64_t n, bool chunked,
                      const std::function<absl::Status(absl::Span<float>)>& on_host);
  // OnHost with the host copy of `data` [0, n) in `host` [0, n) instead of the pool's buffers:
  // memory from RegisterPinned (the data-parallel gradients' shared buffers, which on_host's
  // all-reduce then reads in place). The same chunks as OnHost. On the CPU backend on_host
  // runs over `data` itself, as in OnHost, and `host` is not used.
  absl::Status OnHostIn(float* data, int64_t n, float* host, bool chunked,
                        const std::function<absl::Status(absl::Span<float>)>& on_host);

  StagingStats stats() const;
  void ResetStats();

 private:
  friend class StagedTensor;
  DeviceStaging(kernels::Backend* backend, int64_t chunk_floats)
      : backend_(backend),
        copies_(!backend->DeviceMemoryIsHostMemory()),
        chunk_floats_(chunk_floats) {}
  absl::Status Stage(float* data, int64_t n, float* host_dst, bool chunked,
                     const std::function<absl::Status(absl::Span<float>)>& on_host);
  absl::StatusOr<StagedTensor> Acquire(int64_t n);
  void Release(float* buffer, int64_t capacity);
  // An event recorded on `stream` now.
  absl::StatusOr<std::unique_ptr<kernels::Event>> Record(kernels::Stream stream);

  kernels::Backend* const backend_;
  const bool copies_;
  const int64_t chunk_floats_;
  mutable absl::Mutex mu_;
  std::vector<std::pair<float*, int64_t>> free_ ABSL_GUARDED_BY(mu_);  // (buffer, capacity)
  std::vector<float*> all_ ABSL_GUARDED_BY(mu_);
  StagingStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dtrain::parallel

#endif  // DTRAIN_WORKER_PARALLEL_DEVICE_STAGING_H_
