#include "kernels/cpu/cpu_backend.h"

#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/residual.h"

namespace dtrain::kernels {
namespace {

constexpr size_t kAlignment = 64;

absl::Status CheckCopy(absl::string_view op, const void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": dst is null"));
  if (src == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": src is null"));
  return absl::OkStatus();
}

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int num_threads) : threads_(num_threads) {
    info_.kind = DeviceKind::kCpu;
    info_.name = absl::StrCat("cpu (", num_threads, num_threads == 1 ? " thread)" : " threads)");
    info_.ordinal = 0;
    info_.memory_bytes = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE);
  }

  const DeviceInfo& info() const override { return info_; }

  // ---- Memory and stream: plain host memory, everything synchronous ----------------------
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (bytes > std::numeric_limits<size_t>::max() - kAlignment) {
      return absl::ResourceExhaustedError(absl::StrCat("Allocate: ", bytes, " bytes"));
    }
    // aligned_alloc wants a multiple of the alignment; 0 bytes still gets a unique pointer.
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Allocate: out of host memory allocating ", bytes, " bytes"));
    }
    std::memset(ptr, 0, bytes);
    {
      absl::MutexLock lock(&mu_);
      sizes_[ptr] = rounded;
      in_use_ += static_cast<int64_t>(rounded);
    }
    return ptr;
  }
  void Free(void* ptr) override {
    if (ptr == nullptr) return;
    {
      absl::MutexLock lock(&mu_);
      auto it = sizes_.find(ptr);
      if (it != sizes_.end()) {
        in_use_ -= static_cast<int64_t>(it->second);
        sizes_.erase(it);
      }
    }
    std::free(ptr);
  }
  absl::StatusOr<int64_t> MemoryInUse() override {
    absl::MutexLock lock(&mu_);
    return in_use_;
  }
  absl::Status CopyToDevice(void* dst, const void* host_src, size_t bytes) override {
    return Copy("CopyToDevice", dst, host_src, bytes);
  }
  absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) override {
    return Copy("CopyToHost", host_dst, src, bytes);
  }
  absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes) override {
    return Copy("CopyOnDevice", dst, src, bytes);
  }
  absl::Status Zero(void* dst, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr) return absl::InvalidArgumentError("Zero: dst is null");
    std::memset(dst, 0, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  // ---- Staging: trivially correct, every copy done when it returns --------------------------
  bool DeviceMemoryIsHostMemory() const override { return true; }
  absl::StatusOr<void*> AllocatePinned(size_t bytes) override { return Allocate(bytes); }
  absl::Status RegisterPinned(void*, size_t) override { return absl::OkStatus(); }
  void UnregisterPinned(void*) override {}
  void FreePinned(void* ptr) override { Free(ptr); }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return std::make_unique<Event>();
  }
  absl::Status RecordEvent(Event&, Stream) override { return absl::OkStatus(); }
  absl::Status StreamWaitEvent(Stream, const Event&) override { return absl::OkStatus(); }
  absl::Status SynchronizeEvent(const Event&) override { return absl::OkStatus(); }
  absl::Status CopyToHostAsync(void* pinned_dst, const void* src, size_t bytes) override {
    return Copy("CopyToHostAsync", pinned_dst, src, bytes);
  }
  absl::Status CopyToDeviceAsync(void* dst, const void* pinned_src, size_t bytes) override {
    return Copy("CopyToDeviceAsync", dst, pinned_src, bytes);
  }

  // ---- Ops: forwarded to kernels/cpu/<op>.h ------------------------------------------------
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) override {
    return cpu::Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads_);
  }
  absl::Status EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                const float* wpe, int B, int T, int C) override {
    return cpu::EmbeddingForward(out, tokens, wte, wpe, B, T, C, threads_);
  }
  absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                 int B, int T, int C) override {
    return cpu::EmbeddingBackward(dwte, dwpe, dout, tokens, B, T, C, threads_);
  }
  absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int N, int C) override {
    return cpu::LayerNormForward(out, mean, rstd, inp, weight, bias, N, C, threads_);
  }
  absl::Status LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, int N, int C) override {
    return cpu::LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                  threads_);
  }
  absl::Status MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                             int N, int C, int OC) override {
    return cpu::MatmulForward(out, inp, weight, bias, N, C, OC, threads_);
  }
  absl::Status MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N,
                                   int C, int OC, bool accumulate) override {
    return cpu::MatmulBackwardInput(dinp, dout, weight, N, C, OC, accumulate, threads_);
  }
  absl::Status MatmulBackwardWeight(float* dweight, float* dbias, const float* dout,
                                    const float* inp, int N, int C, int OC) override {
    return cpu::MatmulBackwardWeight(dweight, dbias, dout, inp, N, C, OC, threads_);
  }
  absl::Status GeluForward(float* out, const float* inp, int64_t n) override {
    return cpu::GeluForward(out, inp, n, threads_);
  }
  absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    return cpu::GeluBackward(dinp, inp, dout, n, threads_);
  }
  absl::Status AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C,
                                int NH) override {
    return cpu::AttentionForward(out, att, qkv, B, T, C, NH, threads_);
  }
  absl::Status AttentionBackward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                 const float* att, int B, int T, int C, int NH) override {
    return cpu::AttentionBackward(dqkv, scratch, dout, qkv, att, B, T, C, NH, threads_);
  }
  absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n) override {
    return cpu::ResidualForward(out, a, b, n, threads_);
  }
  absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t n) override {
    return cpu::ResidualBackward(da, db, dout, n, threads_);
  }
  absl::Status CrossEntropyForward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int N, int V) override {
    return cpu::CrossEntropyForward(losses, probs, logits, targets, N, V, threads_);
  }
  absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int N, int V) override {
    return cpu::CrossEntropyBackward(dlogits, probs, targets, dloss, N, V, threads_);
  }
  absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                           const AdamWParams& p) override {
    return cpu::AdamWUpdate(params, grads, m, v, n, p, threads_);
  }
  absl::StatusOr<double> SquaredNorm(const float* x, int64_t n) override {
    return cpu::SquaredNorm(x, n, threads_);
  }
  absl::Status Scale(float* x, float s, int64_t n) override {
    return cpu::Scale(x, s, n, threads_);
  }

 private:
  static absl::Status Copy(absl::string_view op, void* dst, const void* src, size_t bytes) {
    RETURN_IF_ERROR(CheckCopy(op, dst, src, bytes));
    // memmove: a device-to-device copy may overlap. Not with 0 bytes: the pointers may then be
    // null, which memmove must not get (UBSan found CopyOnDevice(nullptr, nullptr, 0)).
    if (bytes > 0) std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }

  const int threads_;
  DeviceInfo info_;
  absl::Mutex mu_;
  absl::flat_hash_map<void*, size_t> sizes_ ABSL_GUARDED_BY(mu_);  // live allocations
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(int num_threads) {
  if (num_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CreateCpuBackend: num_threads must be >= 0 (0 = all cores), got ", num_threads));
  }
  if (num_threads == 0) num_threads = omp_get_num_procs();
  cpu::UseSingleThreadedBlas();
  return std::unique_ptr<Backend>(new CpuBackend(num_threads));
}

}  // namespace dtrain::kernels
