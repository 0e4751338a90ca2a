// A Backend that times every op of another: `dtrain-local --op_profile`, the profile that says
// where a step's time goes on any device (the GPU machines lent to this project have no
// profiler of their own to rely on).
//
// Each compute op (and each copy and zero) runs on the wrapped backend, which is then
// synchronized, and the wall time from the call to the end of the synchronization is added to
// the op's row. A row is an op and its shape ("MatmulForward N=4096 C=768 OC=3072"), so the
// products of one model are told apart. The synchronizations serialize what the device would
// overlap and add a launch latency to each op (a few microseconds on a GPU), so a profiled step
// is slower than an unprofiled one; the shares, not the sum, are what it is for. Memory
// management, pinned buffers, events and the copy stream pass through untimed.
//
//   OpTimingBackend timed(std::move(backend));
//   ... train on &timed ...
//   for (const OpTime& t : timed.Times()) ...   // the slowest rows first
#ifndef DTRAIN_KERNELS_OP_TIMING_BACKEND_H_
#define DTRAIN_KERNELS_OP_TIMING_BACKEND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/backend.h"

namespace dtrain::kernels {

struct OpTime {
  std::string op;  // name and shape
  int64_t calls = 0;
  absl::Duration total;
};

// A table of `times` for people: per row the milliseconds per step (over `steps` steps), its
// share of the sum, the calls per step, and the op; the slowest first, then a total line.
std::string OpProfileTable(const std::vector<OpTime>& times, int64_t steps);

class OpTimingBackend final : public Backend {
 public:
  explicit OpTimingBackend(std::unique_ptr<Backend> inner);

  // Every row, the longest total first (then by name).
  std::vector<OpTime> Times() const;
  // Forgets what was timed so far (a warm-up step's first-call costs).
  void Reset();

  const DeviceInfo& info() const override { return inner_->info(); }
  absl::Status SetMatmulPrecision(MatmulPrecision precision) override {
    return inner_->SetMatmulPrecision(precision);
  }
  MatmulPrecision matmul_precision() const override { return inner_->matmul_precision(); }
  absl::StatusOr<void*> Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  void Free(void* ptr) override { inner_->Free(ptr); }
  absl::StatusOr<int64_t> MemoryInUse() override { return inner_->MemoryInUse(); }
  absl::Status CopyToDevice(void* dst, const void* host_src, size_t bytes) override;
  absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) override;
  absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  absl::Status Zero(void* dst, size_t bytes) override;
  absl::Status Synchronize() override { return inner_->Synchronize(); }

  bool DeviceMemoryIsHostMemory() const override { return inner_->DeviceMemoryIsHostMemory(); }
  absl::StatusOr<void*> AllocatePinned(size_t bytes) override {
    return inner_->AllocatePinned(bytes);
  }
  void FreePinned(void* ptr) override { inner_->FreePinned(ptr); }
  absl::Status RegisterPinned(void* ptr, size_t bytes) override {
    return inner_->RegisterPinned(ptr, bytes);
  }
  void UnregisterPinned(void* ptr) override { inner_->UnregisterPinned(ptr); }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override { return inner_->CreateEvent(); }
  absl::Status RecordEvent(Event& event, Stream stream) override {
    return inner_->RecordEvent(event, stream);
  }
  absl::Status StreamWaitEvent(Stream stream, const Event& event) override {
    return inner_->StreamWaitEvent(stream, event);
  }
  absl::Status SynchronizeEvent(const Event& event) override {
    return inner_->SynchronizeEvent(event);
  }
  absl::Status CopyToHostAsync(void* pinned_dst, const void* src, size_t bytes) override {
    return inner_->CopyToHostAsync(pinned_dst, src, bytes);
  }
  absl::Status CopyToDeviceAsync(void* dst, const void* pinned_src, size_t bytes) override {
    return inner_->CopyToDeviceAsync(dst, pinned_src, bytes);
  }

  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) override;
  absl::Status EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                const float* wpe, int B, int T, int C) override;
  absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                 int B, int T, int C) override;
  absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int N, int C) override;
  absl::Status LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, int N, int C) override;
  absl::Status MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                             int N, int C, int OC) override;
  absl::Status MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N,
                                   int C, int OC, bool accumulate) override;
  absl::Status MatmulBackwardWeight(float* dweight, float* dbias, const float* dout,
                                    const float* inp, int N, int C, int OC) override;
  absl::Status GeluForward(float* out, const float* inp, int64_t n) override;
  absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n) override;
  absl::Status AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C,
                                int NH) override;
  absl::Status AttentionBackward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                 const float* att, int B, int T, int C, int NH) override;
  absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n) override;
  absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t n) override;
  absl::Status CrossEntropyForward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int N, int V) override;
  absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int N, int V) override;
  absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                           const AdamWParams& p) override;
  absl::StatusOr<double> SquaredNorm(const float* x, int64_t n) override;
  absl::Status Scale(float* x, float s, int64_t n) override;

 private:
  // Synchronizes the wrapped backend after `status` (an op just enqueued) and adds the time
  // since `start` to the row `op`; returns the op's error, else the synchronization's.
  absl::Status Timed(absl::Time start, std::string op, absl::Status status);

  std::unique_ptr<Backend> inner_;
  mutable absl::Mutex mu_;
  std::map<std::string, OpTime> times_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dtrain::kernels

#endif  // DTRAIN_KERNELS_OP_TIMING_BACKEND_H_
