#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/common/arg_check.h"
#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/residual.cuh"

namespace dtrain::kernels {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal) : scratch_(this) {
    info_.kind = DeviceKind::kCuda;
    info_.ordinal = ordinal;
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  ~CudaBackend() override;

  // Creates the stream, the cuBLAS handle and the fixed scratch; fills info_.
  absl::Status Init();

  absl::Status SetMatmulPrecision(MatmulPrecision precision) override {
    precision_ = precision;
    return absl::OkStatus();
  }
  MatmulPrecision matmul_precision() const override { return precision_; }
  const DeviceInfo& info() const override { return info_; }

  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  absl::StatusOr<int64_t> MemoryInUse() override;
  absl::Status CopyToDevice(void* dst, const void* host_src, size_t bytes) override;
  absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) override;
  absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  absl::Status Zero(void* dst, size_t bytes) override;
  absl::Status Synchronize() override;

  absl::StatusOr<void*> AllocatePinned(size_t bytes) override;
  void FreePinned(void* ptr) override;
  absl::Status RegisterPinned(void* ptr, size_t bytes) override;
  void UnregisterPinned(void* ptr) override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  absl::Status RecordEvent(Event& event, Stream stream) override;
  absl::Status StreamWaitEvent(Stream stream, const Event& event) override;
  absl::Status SynchronizeEvent(const Event& event) override;
  absl::Status CopyToHostAsync(void* pinned_dst, const void* src, size_t bytes) override;
  absl::Status CopyToDeviceAsync(void* dst, const void* pinned_src, size_t bytes) override;

  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) override {
    RETURN_IF_ERROR(Activate());
    return cuda::Gemm(gemm(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  absl::Status EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                const float* wpe, int B, int T, int C) override {
    RETURN_IF_ERROR(Activate());
    return cuda::EmbeddingForward(out, tokens, wte, wpe, B, T, C, stream_);
  }
  absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                 int B, int T, int C) override {
    RETURN_IF_ERROR(Activate());
    return cuda::EmbeddingBackward(dwte, dwpe, dout, tokens, B, T, C, stream_);
  }

  absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int N, int C) override {
    RETURN_IF_ERROR(Activate());
    return cuda::LayerNormForward(out, mean, rstd, inp, weight, bias, N, C, stream_);
  }
  absl::Status LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, int N, int C) override {
    RETURN_IF_ERROR(Activate());
    return cuda::LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                   &scratch_, stream_);
  }

  absl::Status MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                             int N, int C, int OC) override {
    RETURN_IF_ERROR(Activate());
    return cuda::MatmulForward(gemm(), out, inp, weight, bias, N, C, OC);
  }
  absl::Status MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N,
                                   int C, int OC, bool accumulate) override {
    RETURN_IF_ERROR(Activate());
    return cuda::MatmulBackwardInput(gemm(), dinp, dout, weight, N, C, OC, accumulate);
  }
  absl::Status MatmulBackwardWeight(float* dweight, float* dbias, const float* dout,
                                    const float* inp, int N, int C, int OC) override {
    RETURN_IF_ERROR(Activate());
    return cuda::MatmulBackwardWeight(gemm(), dweight, dbias, dout, inp, N, C, OC);
  }

  absl::Status GeluForward(float* out, const float* inp, int64_t n) override {
    RETURN_IF_ERROR(Activate());
    return cuda::GeluForward(out, inp, n, stream_);
  }
  absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    RETURN_IF_ERROR(Activate());
    return cuda::GeluBackward(dinp, inp, dout, n, stream_);
  }

  absl::Status AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C,
                                int NH) override {
    RETURN_IF_ERROR(Activate());
    return cuda::AttentionForward(gemm(), out, att, qkv, B, T, C, NH);
  }
  absl::Status AttentionBackward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                 const float* att, int B, int T, int C, int NH) override {
    RETURN_IF_ERROR(Activate());
    return cuda::AttentionBackward(gemm(), dqkv, scratch, dout, qkv, att, B, T, C, NH);
  }

  absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n) override {
    RETURN_IF_ERROR(Activate());
    return cuda::ResidualForward(out, a, b, n, stream_);
  }
  absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t n) override {
    RETURN_IF_ERROR(Activate());
    return cuda::ResidualBackward(da, db, dout, n, stream_);
  }

  absl::Status CrossEntropyForward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int N, int V) override {
    RETURN_IF_ERROR(Activate());
    return cuda::CrossEntropyForward(losses, probs, logits, targets, N, V, stream_);
  }
  absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int N, int V) override {
    RETURN_IF_ERROR(Activate());
    return cuda::CrossEntropyBackward(dlogits, probs, targets, dloss, N, V, stream_);
  }

  absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                           const AdamWParams& p) override {
    RETURN_IF_ERROR(Activate());
    return cuda::AdamWUpdate(params, grads, m, v, n, p, stream_);
  }
  absl::StatusOr<double> SquaredNorm(const float* x, int64_t n) override;
  absl::Status Scale(float* x, float s, int64_t n) override {
    RETURN_IF_ERROR(Activate());
    return cuda::Scale(x, s, n, stream_);
  }

 private:
  // Growable device buffers: GEMM operands converted to bf16 (MatmulPrecision::kBf16, slots 0
  // and 1) and the partial column sums of bias and LayerNorm gradients (slot 2).
  class Scratch final : public cuda::DeviceScratch {
   public:
    explicit Scratch(CudaBackend* backend) : backend_(backend) {}
    absl::StatusOr<void*> Get(int slot, size_t bytes) override;
    void Release();

   private:
    CudaBackend* backend_;
    static constexpr int kSlots = 3;
    void* buffers_[kSlots] = {nullptr, nullptr, nullptr};
    size_t sizes_[kSlots] = {0, 0, 0};
  };

  // Makes this backend's GPU current on the calling thread.
  absl::Status Activate() {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(info_.ordinal));
    return absl::OkStatus();
  }
  // Device memory on the stream, not zeroed; at least one byte, so every pointer is unique.
  absl::StatusOr<void*> RawAllocate(size_t bytes);
  void RawFree(void* ptr);
  cudaStream_t StreamOf(Stream stream) const {
    return stream == Stream::kCopy ? copy_stream_ : stream_;
  }
  cuda::GemmContext gemm() {
    return cuda::GemmContext{cublas_api_, cublas_, stream_, precision_, &scratch_};
  }

  DeviceInfo info_;
  MatmulPrecision precision_ = MatmulPrecision::kFp32;  // SetMatmulPrecision
  bool stream_ordered_alloc_ = false;  // cudaMallocAsync/cudaFreeAsync (memory pools)
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // staging copies (CopyToHostAsync, CopyToDeviceAsync)
  const cuda::CublasLibrary* cublas_api_ = nullptr;  // loaded by Init
  cublasHandle_t cublas_ = nullptr;
  Scratch scratch_;
  // SquaredNorm: [0] the result, [1, 1 + kSquaredNormScratchDoubles) the partial sums.
  double* norm_scratch_ = nullptr;
};

absl::Status CudaBackend::Init() {
  RETURN_IF_ERROR(Activate());
  const int ordinal = info_.ordinal;
  cudaDeviceProp prop;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  info_.name = prop.name;
  info_.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);

  int pools = 0;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal));
  stream_ordered_alloc_ = pools != 0;
  if (stream_ordered_alloc_) {
    // Keep freed memory in the device's default pool instead of returning it to the driver at
    // every synchronization (the default threshold, 0, makes each step re-map its buffers).
    cudaMemPool_t pool;
    CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, ordinal));
    uint64_t threshold = UINT64_MAX;
    CUDA_RETURN_IF_ERROR(
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  }

  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  ASSIGN_OR_RETURN(cublas_api_, cuda::LoadCublas());
  CUBLAS_RETURN_IF_ERROR(cublas_api_->Create(&cublas_));
  CUBLAS_RETURN_IF_ERROR(cublas_api_->SetStream(cublas_, stream_));
  ASSIGN_OR_RETURN(void* norm,
                   RawAllocate((1 + cuda::kSquaredNormScratchDoubles) * sizeof(double)));
  norm_scratch_ = static_cast<double*>(norm);
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  // Errors cannot be reported from here; each is cleared so it does not surface elsewhere.
  if (cudaSetDevice(info_.ordinal) != cudaSuccess) (void)cudaGetLastError();
  if (stream_ != nullptr) {
    scratch_.Release();
    RawFree(norm_scratch_);
    if (cudaStreamSynchronize(stream_) != cudaSuccess) (void)cudaGetLastError();
  }
  if (copy_stream_ != nullptr) {
    if (cudaStreamSynchronize(copy_stream_) != cudaSuccess) (void)cudaGetLastError();
    if (cudaStreamDestroy(copy_stream_) != cudaSuccess) (void)cudaGetLastError();
  }
  if (cublas_ != nullptr) cublas_api_->Destroy(cublas_);
  if (stream_ != nullptr && cudaStreamDestroy(stream_) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

absl::StatusOr<void*> CudaBackend::RawAllocate(size_t bytes) {
  void* ptr = nullptr;
  const size_t size = bytes == 0 ? 1 : bytes;
  if (stream_ordered_alloc_) {
    CUDA_RETURN_IF_ERROR(cudaMallocAsync(&ptr, size, stream_));
  } else {
    CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, size));
  }
  return ptr;
}

absl::StatusOr<int64_t> CudaBackend::MemoryInUse() {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<int64_t>(total_bytes - free_bytes);
}

void CudaBackend::RawFree(void* ptr) {
  if (ptr == nullptr) return;
  const cudaError_t error = stream_ordered_alloc_ ? cudaFreeAsync(ptr, stream_) : cudaFree(ptr);
  if (error != cudaSuccess) (void)cudaGetLastError();
}

absl::StatusOr<void*> CudaBackend::Scratch::Get(int slot, size_t bytes) {
  if (slot < 0 || slot >= kSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("scratch slot ", slot, " not in [0, ", kSlots, ")"));
  }
  if (sizes_[slot] >= bytes) return buffers_[slot];
  // Stream-ordered: ops already enqueued that read the old buffer run before it is freed.
  backend_->RawFree(buffers_[slot]);
  buffers_[slot] = nullptr;
  sizes_[slot] = 0;
  ASSIGN_OR_RETURN(buffers_[slot], backend_->RawAllocate(bytes));
  sizes_[slot] = bytes;
  return buffers_[slot];
}

void CudaBackend::Scratch::Release() {
  for (int slot = 0; slot < kSlots; ++slot) {
    backend_->RawFree(buffers_[slot]);
    buffers_[slot] = nullptr;
    sizes_[slot] = 0;
  }
}

absl::StatusOr<void*> CudaBackend::Allocate(size_t bytes) {
  RETURN_IF_ERROR(Activate());
  ASSIGN_OR_RETURN(void* ptr, RawAllocate(bytes));
  const cudaError_t error = cudaMemsetAsync(ptr, 0, bytes, stream_);
  if (error != cudaSuccess) {
    absl::Status status = cuda::CudaErrorToStatus(error, "cudaMemsetAsync(ptr, 0, bytes, stream)",
                                                  __FILE__, __LINE__);
    RawFree(ptr);
    return status;
  }
  return ptr;
}

void CudaBackend::Free(void* ptr) {
  if (ptr == nullptr) return;
  if (cudaSetDevice(info_.ordinal) != cudaSuccess) (void)cudaGetLastError();
  RawFree(ptr);
}

absl::Status CudaBackend::CopyToDevice(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  ArgCheck check("CopyToDevice");
  RETURN_IF_ERROR(check.NotNull("dst", dst).NotNull("host_src", host_src).status());
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyToHost(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  ArgCheck check("CopyToHost");
  RETURN_IF_ERROR(check.NotNull("host_dst", host_dst).NotNull("src", src).status());
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  ArgCheck check("CopyOnDevice");
  RETURN_IF_ERROR(check.NotNull("dst", dst).NotNull("src", src).status());
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Zero(void* dst, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  ArgCheck check("Zero");
  RETURN_IF_ERROR(check.NotNull("dst", dst).status());
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, 0, bytes, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Synchronize() {
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_));
  return absl::OkStatus();
}

// ---- Staging ------------------------------------------------------------------------------

class CudaEvent final : public Event {
 public:
  ~CudaEvent() override {
    if (event != nullptr && cudaEventDestroy(event) != cudaSuccess) (void)cudaGetLastError();
  }
  cudaEvent_t event = nullptr;
};

cudaEvent_t EventOf(const Event& event) { return static_cast<const CudaEvent&>(event).event; }

absl::StatusOr<void*> CudaBackend::AllocatePinned(size_t bytes) {
  RETURN_IF_ERROR(Activate());
  void* ptr = nullptr;
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(&ptr, bytes == 0 ? 1 : bytes, cudaHostAllocPortable));
  return ptr;
}

void CudaBackend::FreePinned(void* ptr) {
  if (ptr != nullptr && cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

absl::Status CudaBackend::RegisterPinned(void* ptr, size_t bytes) {
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable));
  return absl::OkStatus();
}

void CudaBackend::UnregisterPinned(void* ptr) {
  if (ptr != nullptr && cudaHostUnregister(ptr) != cudaSuccess) (void)cudaGetLastError();
}

absl::StatusOr<std::unique_ptr<Event>> CudaBackend::CreateEvent() {
  RETURN_IF_ERROR(Activate());
  auto event = std::make_unique<CudaEvent>();
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event->event, cudaEventDisableTiming));
  return std::unique_ptr<Event>(std::move(event));
}

absl::Status CudaBackend::RecordEvent(Event& event, Stream stream) {
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaEventRecord(EventOf(event), StreamOf(stream)));
  return absl::OkStatus();
}

absl::Status CudaBackend::StreamWaitEvent(Stream stream, const Event& event) {
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(StreamOf(stream), EventOf(event), 0));
  return absl::OkStatus();
}

absl::Status CudaBackend::SynchronizeEvent(const Event& event) {
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(EventOf(event)));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyToHostAsync(void* pinned_dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  ArgCheck check("CopyToHostAsync");
  RETURN_IF_ERROR(check.NotNull("pinned_dst", pinned_dst).NotNull("src", src).status());
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(pinned_dst, src, bytes, cudaMemcpyDeviceToHost, copy_stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyToDeviceAsync(void* dst, const void* pinned_src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  ArgCheck check("CopyToDeviceAsync");
  RETURN_IF_ERROR(check.NotNull("dst", dst).NotNull("pinned_src", pinned_src).status());
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, pinned_src, bytes, cudaMemcpyHostToDevice, copy_stream_));
  return absl::OkStatus();
}

absl::StatusOr<double> CudaBackend::SquaredNorm(const float* x, int64_t n) {
  RETURN_IF_ERROR(Activate());
  RETURN_IF_ERROR(cuda::SquaredNorm(norm_scratch_, norm_scratch_ + 1, x, n, stream_));
  double result = 0.0;
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&result, norm_scratch_, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return result;
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int ordinal) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    const std::string returned = error != cudaSuccess ? absl::StrCat(cudaGetErrorName(error), " (",
                                                                     cudaGetErrorString(error), ")")
                                                      : std::string("0 devices");
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA GPU found: cudaGetDeviceCount returned ", returned));
  }
  if (ordinal < 0 || ordinal >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA GPU ", ordinal, " does not exist: this machine has ", count,
                     count == 1 ? " CUDA GPU (ordinal 0)"
                                : absl::StrCat(" CUDA GPUs (ordinals 0..", count - 1, ")")));
  }
  auto backend = std::make_unique<CudaBackend>(ordinal);
  RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace dtrain::kernels
