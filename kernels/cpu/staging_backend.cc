#include "kernels/cpu/staging_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_backend.h"

namespace dtrain::kernels {
namespace {

class StagingEvent final : public Event {
 public:
  // The notification of the latest record; null when never recorded (counts as completed).
  std::shared_ptr<absl::Notification> done;
};

const StagingEvent& Cast(const Event& event) { return static_cast<const StagingEvent&>(event); }

class StagingCpuBackend final : public Backend {
 public:
  explicit StagingCpuBackend(std::unique_ptr<Backend> cpu)
      : cpu_(std::move(cpu)), page_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
    info_ = cpu_->info();
    info_.name = absl::StrCat("cpu-staging: ", info_.name);
    copier_ = std::thread([this] { CopyLoop(); });
  }
  ~StagingCpuBackend() override {
    {
      absl::MutexLock lock(&queue_mu_);
      stop_ = true;
    }
    copier_.join();
    absl::MutexLock lock(&mu_);
    for (auto& [base, a] : allocations_) Unmap(base, a);
    for (auto& [base, size] : pinned_) std::free(reinterpret_cast<void*>(base));
  }

  const DeviceInfo& info() const override { return info_; }

  // ---- Memory: each allocation mapped twice, PROT_NONE where the caller sees it ------------
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    const size_t mapped = std::max(page_, (bytes + page_ - 1) / page_ * page_);
    // The backend's view: shared, so that mremap can map the same pages a second time.
    void* work = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (work == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Allocate: mmap of ", bytes, " bytes failed: ", std::strerror(errno)));
    }
    void* device = mremap(work, 0, mapped, MREMAP_MAYMOVE);  // old size 0: a second mapping
    if (device == MAP_FAILED || mprotect(device, mapped, PROT_NONE) != 0) {
      const std::string why = std::strerror(errno);
      if (device != MAP_FAILED) munmap(device, mapped);
      munmap(work, mapped);
      return absl::ResourceExhaustedError(
          absl::StrCat("Allocate: the device view of ", bytes, " bytes failed: ", why));
    }
    absl::MutexLock lock(&mu_);
    allocations_[reinterpret_cast<uintptr_t>(device)] = {bytes, mapped,
                                                         static_cast<std::byte*>(work)};
    in_use_ += static_cast<int64_t>(mapped);
    return device;
  }
  void Free(void* ptr) override {
    if (ptr == nullptr) return;
    absl::MutexLock lock(&mu_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocations_.end()) return;
    Unmap(it->first, it->second);
    in_use_ -= static_cast<int64_t>(it->second.mapped);
    allocations_.erase(it);
  }
  absl::StatusOr<int64_t> MemoryInUse() override {
    absl::MutexLock lock(&mu_);
    return in_use_;
  }
  absl::Status CopyToDevice(void* dst, const void* host_src, size_t bytes) override {
    RETURN_IF_ERROR(NotDevice("CopyToDevice", "host_src", host_src));
    RETURN_IF_ERROR(ToViews("CopyToDevice", dst));
    return cpu_->CopyToDevice(dst, host_src, bytes);
  }
  absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) override {
    RETURN_IF_ERROR(NotDevice("CopyToHost", "host_dst", host_dst));
    RETURN_IF_ERROR(ToViews("CopyToHost", src));
    return cpu_->CopyToHost(host_dst, src, bytes);
  }
  absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes) override {
    RETURN_IF_ERROR(ToViews("CopyOnDevice", dst, src));
    return cpu_->CopyOnDevice(dst, src, bytes);
  }
  absl::Status Zero(void* dst, size_t bytes) override {
    RETURN_IF_ERROR(ToViews("Zero", dst));
    return cpu_->Zero(dst, bytes);
  }
  absl::Status Synchronize() override {
    auto done = std::make_shared<absl::Notification>();
    Enqueue([done] { done->Notify(); });
    done->WaitForNotification();
    return CopyError();
  }

  // ---- Staging: the copy stream is the copier_ thread --------------------------------------
  absl::StatusOr<void*> AllocatePinned(size_t bytes) override {
    void* ptr = std::malloc(bytes == 0 ? 1 : bytes);
    if (ptr == nullptr) return absl::ResourceExhaustedError("AllocatePinned: out of host memory");
    absl::MutexLock lock(&mu_);
    pinned_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
    return ptr;
  }
  void FreePinned(void* ptr) override {
    if (ptr == nullptr) return;
    {
      absl::MutexLock lock(&mu_);
      pinned_.erase(reinterpret_cast<uintptr_t>(ptr));
    }
    std::free(ptr);
  }
  // The range becomes valid for the copies' pinned check; it stays the caller's to free.
  absl::Status RegisterPinned(void* ptr, size_t bytes) override {
    if (ptr == nullptr) return absl::InvalidArgumentError("RegisterPinned: null pointer");
    absl::MutexLock lock(&mu_);
    registered_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
    return absl::OkStatus();
  }
  void UnregisterPinned(void* ptr) override {
    absl::MutexLock lock(&mu_);
    registered_.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return std::make_unique<StagingEvent>();
  }
  absl::Status RecordEvent(Event& event, Stream stream) override {
    auto done = std::make_shared<absl::Notification>();
    static_cast<StagingEvent&>(event).done = done;
    if (stream == Stream::kCompute) {
      done->Notify();  // compute ops ran on the caller: everything enqueued so far is done
    } else {
      Enqueue([done] { done->Notify(); });
    }
    return absl::OkStatus();
  }
  absl::Status StreamWaitEvent(Stream stream, const Event& event) override {
    std::shared_ptr<absl::Notification> done = Cast(event).done;
    if (done == nullptr) return absl::OkStatus();
    if (stream == Stream::kCompute) {
      done->WaitForNotification();
      return CopyError();
    }
    Enqueue([done] { done->WaitForNotification(); });
    return absl::OkStatus();
  }
  absl::Status SynchronizeEvent(const Event& event) override {
    if (std::shared_ptr<absl::Notification> done = Cast(event).done) done->WaitForNotification();
    return CopyError();
  }
  absl::Status CopyToHostAsync(void* pinned_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(CheckPinned("CopyToHostAsync", pinned_dst, bytes));
    RETURN_IF_ERROR(CheckDevice("CopyToHostAsync", src));
    Enqueue([this, pinned_dst, src, bytes] {
      const void* from = src;
      absl::Status s = ToViews("CopyToHostAsync", from);
      if (s.ok()) std::memcpy(pinned_dst, from, bytes);
      SetCopyError(s);
    });
    return absl::OkStatus();
  }
  absl::Status CopyToDeviceAsync(void* dst, const void* pinned_src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(CheckPinned("CopyToDeviceAsync", pinned_src, bytes));
    RETURN_IF_ERROR(CheckDevice("CopyToDeviceAsync", dst));
    Enqueue([this, dst, pinned_src, bytes] {
      void* to = dst;
      absl::Status s = ToViews("CopyToDeviceAsync", to);
      if (s.ok()) std::memcpy(to, pinned_src, bytes);
      SetCopyError(s);
    });
    return absl::OkStatus();
  }

  // ---- Ops: the CPU backend's, inside a window on their pointer arguments -------------------
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) override {
    RETURN_IF_ERROR(ToViews("Gemm", a, b, c));
    return cpu_->Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  absl::Status EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                const float* wpe, int B, int T, int C) override {
    RETURN_IF_ERROR(ToViews("EmbeddingForward", out, tokens, wte, wpe));
    return cpu_->EmbeddingForward(out, tokens, wte, wpe, B, T, C);
  }
  absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                 int B, int T, int C) override {
    RETURN_IF_ERROR(ToViews("EmbeddingBackward", dwte, dwpe, dout, tokens));
    return cpu_->EmbeddingBackward(dwte, dwpe, dout, tokens, B, T, C);
  }
  absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int N, int C) override {
    RETURN_IF_ERROR(ToViews("LayerNormForward", out, mean, rstd, inp, weight, bias));
    return cpu_->LayerNormForward(out, mean, rstd, inp, weight, bias, N, C);
  }
  absl::Status LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, int N, int C) override {
    RETURN_IF_ERROR(
        ToViews("LayerNormBackward", dinp, dweight, dbias, dout, inp, weight, mean, rstd));
    return cpu_->LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  absl::Status MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                             int N, int C, int OC) override {
    RETURN_IF_ERROR(ToViews("MatmulForward", out, inp, weight, bias));
    return cpu_->MatmulForward(out, inp, weight, bias, N, C, OC);
  }
  absl::Status MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N,
                                   int C, int OC, bool accumulate) override {
    RETURN_IF_ERROR(ToViews("MatmulBackwardInput", dinp, dout, weight));
    return cpu_->MatmulBackwardInput(dinp, dout, weight, N, C, OC, accumulate);
  }
  absl::Status MatmulBackwardWeight(float* dweight, float* dbias, const float* dout,
                                    const float* inp, int N, int C, int OC) override {
    RETURN_IF_ERROR(ToViews("MatmulBackwardWeight", dweight, dbias, dout, inp));
    return cpu_->MatmulBackwardWeight(dweight, dbias, dout, inp, N, C, OC);
  }
  absl::Status GeluForward(float* out, const float* inp, int64_t n) override {
    RETURN_IF_ERROR(ToViews("GeluForward", out, inp));
    return cpu_->GeluForward(out, inp, n);
  }
  absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    RETURN_IF_ERROR(ToViews("GeluBackward", dinp, inp, dout));
    return cpu_->GeluBackward(dinp, inp, dout, n);
  }
  absl::Status AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C,
                                int NH) override {
    RETURN_IF_ERROR(ToViews("AttentionForward", out, att, qkv));
    return cpu_->AttentionForward(out, att, qkv, B, T, C, NH);
  }
  absl::Status AttentionBackward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                 const float* att, int B, int T, int C, int NH) override {
    RETURN_IF_ERROR(ToViews("AttentionBackward", dqkv, scratch, dout, qkv, att));
    return cpu_->AttentionBackward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
  }
  absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n) override {
    RETURN_IF_ERROR(ToViews("ResidualForward", out, a, b));
    return cpu_->ResidualForward(out, a, b, n);
  }
  absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t n) override {
    RETURN_IF_ERROR(ToViews("ResidualBackward", da, db, dout));
    return cpu_->ResidualBackward(da, db, dout, n);
  }
  absl::Status CrossEntropyForward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int N, int V) override {
    RETURN_IF_ERROR(ToViews("CrossEntropyForward", losses, probs, logits, targets));
    return cpu_->CrossEntropyForward(losses, probs, logits, targets, N, V);
  }
  absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int N, int V) override {
    RETURN_IF_ERROR(ToViews("CrossEntropyBackward", dlogits, probs, targets));
    return cpu_->CrossEntropyBackward(dlogits, probs, targets, dloss, N, V);
  }
  absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                           const AdamWParams& p) override {
    RETURN_IF_ERROR(ToViews("AdamWUpdate", params, grads, m, v));
    return cpu_->AdamWUpdate(params, grads, m, v, n, p);
  }
  absl::StatusOr<double> SquaredNorm(const float* x, int64_t n) override {
    RETURN_IF_ERROR(ToViews("SquaredNorm", x));
    return cpu_->SquaredNorm(x, n);
  }
  absl::Status Scale(float* x, float s, int64_t n) override {
    RETURN_IF_ERROR(ToViews("Scale", x));
    return cpu_->Scale(x, s, n);
  }

 private:
  struct Allocation {
    size_t bytes = 0;           // as asked
    size_t mapped = 0;          // whole pages, at least one
    std::byte* work = nullptr;  // the backend's view of the same pages, readable and writable
  };

  // The allocation holding `p` (its one-past-the-end counts: an empty range at the end).
  std::map<uintptr_t, Allocation>::iterator Find(const void* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    auto it = allocations_.upper_bound(addr);
    if (it == allocations_.begin()) return allocations_.end();
    --it;
    if (addr > it->first + it->second.bytes) return allocations_.end();
    return it;
  }

  // Rebinds each device pointer an op takes to the same byte of the backend's view (null stays
  // null: optional arguments such as bias; the op checks the rest). InvalidArgument naming the
  // op for a pointer in no allocation.
  template <typename... T>
  absl::Status ToViews(absl::string_view op, T*&... pointers) {
    absl::MutexLock lock(&mu_);
    absl::Status status;
    ((pointers = ViewLocked(op, pointers, status)), ...);
    return status;
  }
  template <typename T>
  T* ViewLocked(absl::string_view op, T* p, absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (p == nullptr) return nullptr;
    auto it = Find(p);
    if (it == allocations_.end()) {
      status.Update(absl::InvalidArgumentError(absl::StrFormat(
          "%s: pointer %p is not device memory of this backend (--device=cpu-staging: host "
          "memory passed where device memory is expected)",
          op, p)));
      return nullptr;
    }
    using Byte = std::conditional_t<std::is_const_v<T>, const std::byte, std::byte>;
    const uintptr_t offset = reinterpret_cast<uintptr_t>(p) - it->first;
    return reinterpret_cast<T*>(static_cast<Byte*>(it->second.work) + offset);
  }
  static void Unmap(uintptr_t device, const Allocation& a) {
    munmap(reinterpret_cast<void*>(device), a.mapped);
    munmap(a.work, a.mapped);
  }

  absl::Status CheckDevice(absl::string_view op, const void* p) {
    absl::MutexLock lock(&mu_);
    if (Find(p) != allocations_.end()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %p is not device memory of this backend", op, p));
  }
  absl::Status NotDevice(absl::string_view op, absl::string_view arg, const void* p) {
    absl::MutexLock lock(&mu_);
    if (p == nullptr || Find(p) == allocations_.end()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s %p is device memory; expected host memory", op, arg, p));
  }
  absl::Status CheckPinned(absl::string_view op, const void* p, size_t bytes) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    absl::MutexLock lock(&mu_);
    for (const std::map<uintptr_t, size_t>* ranges : {&pinned_, &registered_}) {
      auto it = ranges->upper_bound(addr);
      if (it != ranges->begin() && addr + bytes <= std::prev(it)->first + std::prev(it)->second) {
        return absl::OkStatus();
      }
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: host buffer %p (%d bytes) is not inside memory from AllocatePinned or RegisterPinned",
        op, p, bytes));
  }

  // ---- The copy stream ---------------------------------------------------------------------
  void Enqueue(std::function<void()> work) {
    absl::MutexLock lock(&queue_mu_);
    queue_.push_back(std::move(work));
  }
  void CopyLoop() {
    while (true) {
      std::function<void()> work;
      {
        absl::MutexLock lock(&queue_mu_);
        queue_mu_.Await(absl::Condition(
            +[](StagingCpuBackend* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->queue_mu_) {
              return self->stop_ || !self->queue_.empty();
            },
            this));
        if (queue_.empty()) return;  // stop_, and everything enqueued has run
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      work();
    }
  }
  void SetCopyError(const absl::Status& s) {
    if (s.ok()) return;
    absl::MutexLock lock(&queue_mu_);
    if (copy_error_.ok()) copy_error_ = s;
  }
  absl::Status CopyError() {
    absl::MutexLock lock(&queue_mu_);
    return copy_error_;
  }

  const std::unique_ptr<Backend> cpu_;  // the ops
  const size_t page_;
  DeviceInfo info_;
  absl::Mutex mu_;
  std::map<uintptr_t, Allocation> allocations_ ABSL_GUARDED_BY(mu_);
  std::map<uintptr_t, size_t> pinned_ ABSL_GUARDED_BY(mu_);      // base -> bytes
  std::map<uintptr_t, size_t> registered_ ABSL_GUARDED_BY(mu_);  // base -> bytes, not ours
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex queue_mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  absl::Status copy_error_ ABSL_GUARDED_BY(queue_mu_);
  std::thread copier_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateStagingCpuBackend(int num_threads) {
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> cpu, CreateCpuBackend(num_threads));
  return std::unique_ptr<Backend>(new StagingCpuBackend(std::move(cpu)));
}

}  // namespace dtrain::kernels
