// The compute backend: device memory, one stream, GEMM and the training ops of a GPT-2 model.
//
// Two implementations: kernels/cpu (OpenBLAS + plain loops; the readable reference) and
// kernels/cuda (cuBLAS + our own kernels). Every op is a forward/backward pair. Pointers passed
// to ops are device pointers obtained from Allocate(); only the backend dereferences them.
// Ops are enqueued on the backend's stream in call order; Synchronize() waits for them.
// Shape letters are fixed across dtrain (kernels/README.md): B batch, T time, C channels,
// V vocabulary, NH heads, hs = C/NH head size, N = B*T rows, OC output channels.
//
// Staging (what multi-worker ranks use to hand tensors to the network): pinned host buffers,
// asynchronous copies on a second stream (the copy stream), and events that order the two
// streams. A device-to-host copy of a kernel's output is enqueued after an event recorded on
// the compute stream behind that kernel; the host reads the buffer only after an event recorded
// on the copy stream behind the copy has completed. kernels/README.md "Staging" has the recipe.
//
// Gradient convention: parameter gradients always accumulate (+=), so micro-batches sum into the
// same buffers; activation gradients overwrite unless the op says otherwise.
#ifndef DTRAIN_KERNELS_BACKEND_H_
#define DTRAIN_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dtrain::kernels {

enum class DeviceKind { kCpu, kCuda };

struct DeviceInfo {
  DeviceKind kind = DeviceKind::kCpu;
  std::string name;          // "cpu (2 threads)", "NVIDIA H100 80GB HBM3"
  int ordinal = 0;           // GPU index for CUDA, 0 for CPU
  int64_t memory_bytes = 0;  // total device memory; host RAM for CPU
};

// Inputs to GEMMs on tensor-core devices. Accumulation and outputs stay fp32 in every mode. Only
// the CUDA backend has kTf32 and kBf16; the CPU backend computes in fp32, and CreateBackend
// refuses the others for it.
enum class MatmulPrecision { kFp32, kTf32, kBf16 };

// "fp32", "tf32" or "bf16" (dtrain-local's --matmul_precision); InvalidArgument naming the
// value otherwise.
absl::StatusOr<MatmulPrecision> ParseMatmulPrecision(absl::string_view name);
// The inverse: "fp32", "tf32" or "bf16". Inline: Backend's own messages use it.
inline absl::string_view MatmulPrecisionName(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::kTf32:
      return "tf32";
    case MatmulPrecision::kBf16:
      return "bf16";
    case MatmulPrecision::kFp32:
      break;
  }
  return "fp32";
}

// Hyper-parameters of one AdamW step (PyTorch's torch.optim.AdamW semantics, decoupled decay).
struct AdamWParams {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int step = 1;             // 1-based step count, for bias correction
  float grad_scale = 1.0f;  // gradients are multiplied by this first (global-norm clipping)
};

// The two streams of a backend. Work on one stream runs in the order it was enqueued; the two
// streams run concurrently unless an event orders them.
enum class Stream { kCompute, kCopy };

// A point in a stream's work (cudaEvent_t on CUDA). Created by Backend::CreateEvent, used only
// with the backend that created it. An event never recorded counts as completed.
class Event {
 public:
  virtual ~Event() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const DeviceInfo& info() const = 0;

  // The GEMM inputs of the ops enqueued from now on: a job's choice (JobSpec.matmul_precision),
  // set before its first op, never while another thread's ops are in flight. A backend that
  // computes in fp32 only (the CPU's) refuses anything else, InvalidArgument naming both.
  virtual absl::Status SetMatmulPrecision(MatmulPrecision precision) {
    if (precision == MatmulPrecision::kFp32) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("matmul precision ", MatmulPrecisionName(precision),
                     " needs a CUDA device; the backend of ", info().name, " computes in fp32"));
  }
  virtual MatmulPrecision matmul_precision() const { return MatmulPrecision::kFp32; }

  // ---- Memory and stream -------------------------------------------------------------------
  // Returns zero-filled device memory of `bytes` (0 bytes gives a valid unique pointer).
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  // Device memory in use now, in bytes: what this backend holds (CPU), or the whole device's
  // used memory as the driver reports it (CUDA: total - free, other processes included).
  virtual absl::StatusOr<int64_t> MemoryInUse() = 0;
  virtual absl::Status CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status Zero(void* dst, size_t bytes) = 0;
  // Waits until every op enqueued so far, on both streams, has finished; reports asynchronous
  // errors.
  virtual absl::Status Synchronize() = 0;

  // ---- Staging: pinned host memory, the copy stream, events ---------------------------------
  // True when device pointers are host memory any thread may read and write (the CPU backend):
  // staging is then skipped and the transport reads device memory directly. False for CUDA and
  // for the cpu-staging test backend.
  virtual bool DeviceMemoryIsHostMemory() const { return false; }
  // Host memory the copy stream can read and write asynchronously (cudaHostAlloc on CUDA,
  // ordinary host memory on the CPU backends). Not zero-filled.
  virtual absl::StatusOr<void*> AllocatePinned(size_t bytes) = 0;
  virtual void FreePinned(void* ptr) = 0;
  // Makes host memory allocated elsewhere (a segment the data-parallel ranks share) a valid
  // host side of the copies below, as AllocatePinned's is (cudaHostRegister on CUDA), until
  // UnregisterPinned(ptr), which must come before the memory is unmapped.
  virtual absl::Status RegisterPinned(void* ptr, size_t bytes) = 0;
  virtual void UnregisterPinned(void* ptr) = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;
  // Marks the point after everything enqueued on `stream` so far; re-recording moves the mark.
  virtual absl::Status RecordEvent(Event& event, Stream stream) = 0;
  // Work enqueued on `stream` after this call starts only once `event` has completed (the
  // calling thread does not wait, except on the CPU backends' compute stream, which runs ops
  // on the calling thread).
  virtual absl::Status StreamWaitEvent(Stream stream, const Event& event) = 0;
  // Blocks the calling thread until `event` has completed; reports asynchronous errors.
  virtual absl::Status SynchronizeEvent(const Event& event) = 0;
  // Copies on the copy stream. The host side must come from AllocatePinned and stay untouched
  // until an event recorded on kCopy after the copy has completed; the device side is ordered
  // against compute only by events (a D2H copy of a kernel's output waits on an event recorded
  // on kCompute after the kernel). Safe to call from any thread.
  virtual absl::Status CopyToHostAsync(void* pinned_dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyToDeviceAsync(void* dst, const void* pinned_src, size_t bytes) = 0;

  // ---- GEMM --------------------------------------------------------------------------------
  // Row-major: c (m,n) = alpha * op(a) (m,k) @ op(b) (k,n) + beta * c, where op(x) is x or x^T.
  // lda/ldb/ldc are row strides of a, b, c as stored.
  virtual absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc) = 0;

  // ---- Embedding: token + position --------------------------------------------------------
  // out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens (B,T) int32 in [0,V); wte (V,C); wpe (>=T,C).
  virtual absl::Status EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                        const float* wpe, int B, int T, int C) = 0;
  // dwte[tokens[b,t]] += dout[b,t]; dwpe[t] += sum_b dout[b,t].
  virtual absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                                         const int32_t* tokens, int B, int T, int C) = 0;

  // ---- LayerNorm (eps 1e-5) -----------------------------------------------------------------
  // out (N,C) = (inp - mean) * rstd * weight + bias; saves mean (N) and rstd (N).
  virtual absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                        const float* weight, const float* bias, int N, int C) = 0;
  // dinp (N,C) += ..., dweight (C) += ..., dbias (C) += ...
  virtual absl::Status LayerNormBackward(float* dinp, float* dweight, float* dbias,
                                         const float* dout, const float* inp, const float* weight,
                                         const float* mean, const float* rstd, int N, int C) = 0;

  // ---- Matmul with bias, weight stored (in, out) as Hugging Face's Conv1D -------------------
  // out (N,OC) = inp (N,C) @ weight (C,OC) + bias (OC); bias may be null.
  virtual absl::Status MatmulForward(float* out, const float* inp, const float* weight,
                                     const float* bias, int N, int C, int OC) = 0;
  // Input gradient (the "B" of zero-bubble schedules): dinp (N,C) = dout (N,OC) @ weight^T,
  // added into dinp when `accumulate`.
  virtual absl::Status MatmulBackwardInput(float* dinp, const float* dout, const float* weight,
                                           int N, int C, int OC, bool accumulate) = 0;
  // Weight gradient (the "W"): dweight (C,OC) += inp^T @ dout; dbias (OC) += sum_n dout (null
  // dbias skips it).
  virtual absl::Status MatmulBackwardWeight(float* dweight, float* dbias, const float* dout,
                                            const float* inp, int N, int C, int OC) = 0;

  // ---- GELU, tanh approximation ------------------------------------------------------------
  virtual absl::Status GeluForward(float* out, const float* inp, int64_t n) = 0;
  // dinp = gelu'(inp) * dout.
  virtual absl::Status GeluBackward(float* dinp, const float* inp, const float* dout,
                                    int64_t n) = 0;

  // ---- Causal multi-head self-attention ----------------------------------------------------
  // qkv (B,T,3C) holds [q | k | v], head h in columns [h*hs, (h+1)*hs) of each part.
  // att (B,NH,T,T): softmax(q k^T / sqrt(hs)) with the causal mask (zeros above the diagonal).
  // out (B,T,C) = att @ v, heads concatenated.
  virtual absl::Status AttentionForward(float* out, float* att, const float* qkv, int B, int T,
                                        int C, int NH) = 0;
  // dqkv (B,T,3C) overwritten; scratch (B,NH,T,T) is workspace.
  virtual absl::Status AttentionBackward(float* dqkv, float* scratch, const float* dout,
                                         const float* qkv, const float* att, int B, int T, int C,
                                         int NH) = 0;

  // ---- Residual add ------------------------------------------------------------------------
  // out = a + b (n elements).
  virtual absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n) = 0;
  // da += dout; db += dout.
  virtual absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t n) = 0;

  // ---- Fused softmax + cross-entropy -------------------------------------------------------
  // probs (N,V) = softmax(logits (N,V)); losses (N) = -log probs[n, targets[n]].
  virtual absl::Status CrossEntropyForward(float* losses, float* probs, const float* logits,
                                           const int32_t* targets, int N, int V) = 0;
  // dlogits (N,V) = (probs - onehot(targets)) * dloss (the same dloss for every row, e.g. 1/N).
  virtual absl::Status CrossEntropyBackward(float* dlogits, const float* probs,
                                            const int32_t* targets, float dloss, int N, int V) = 0;

  // ---- Optimizer ---------------------------------------------------------------------------
  // One AdamW step on n elements: params, m, v updated in place; grads read (times grad_scale).
  virtual absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                                   const AdamWParams& p) = 0;
  // Sum of squares of x (n), accumulated in double; used for global-norm clipping.
  virtual absl::StatusOr<double> SquaredNorm(const float* x, int64_t n) = 0;
  // x *= s.
  virtual absl::Status Scale(float* x, float s, int64_t n) = 0;
};

// "cpu", "cpu-staging", "cuda", "cuda:N" or "auto" (CUDA GPU 0 when this build has CUDA and a
// GPU is present, else the CPU). "cpu-staging" is the CPU backend with device memory nobody else
// may touch and asynchronous copies (kernels/cpu/staging_backend.h): the test bed of staging.
// `cpu_threads` sets the CPU backend's thread count (0 = all cores); `precision` the CUDA backend's
// GEMM inputs. Errors name the problem: unknown device string, CUDA not built in, no GPU found,
// kTf32 or kBf16 for the CPU backend (also when "auto" finds no GPU).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    absl::string_view device, int cpu_threads = 0,
    MatmulPrecision precision = MatmulPrecision::kFp32);

}  // namespace dtrain::kernels

#endif  // DTRAIN_KERNELS_BACKEND_H_
