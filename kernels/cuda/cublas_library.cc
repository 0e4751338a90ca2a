#include "kernels/cuda/cublas_library.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <string>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"

namespace dtrain::kernels::cuda {
namespace {

#define DTRAIN_STRINGIFY_(x) #x
#define DTRAIN_STRINGIFY(x) DTRAIN_STRINGIFY_(x)
constexpr char kLibraryName[] = "libcublas.so." DTRAIN_STRINGIFY(CUBLAS_VER_MAJOR);

struct Loaded {
  CublasLibrary table;
  absl::Status status;
};

// Resolves `symbol` of `handle` into `*fn`; false, with `*why` saying which, when it is missing.
template <typename Fn>
bool Resolve(void* handle, const char* symbol, Fn* fn, std::string* why) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (*fn == nullptr) absl::StrAppend(why, why->empty() ? "" : ", ", symbol);
  return *fn != nullptr;
}

std::string LastDlError() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown error";
}

// `kLibraryName` in the directory of the loaded libcudart, or "" when that is unknown.
std::string BesideCudart() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  const std::string cudart = info.dli_fname;
  const size_t slash = cudart.rfind('/');
  if (slash == std::string::npos) return "";
  return absl::StrCat(cudart.substr(0, slash + 1), kLibraryName);
}

Loaded Open() {
  Loaded loaded{};
  // Never closed: the handles and streams made through it live until the process ends. First
  // by name (the library path, the loader's cache), then next to the libcudart this process
  // loaded (found through the binary's RUNPATH, as cuBLAS was when it was linked).
  void* handle = dlopen(kLibraryName, RTLD_NOW | RTLD_LOCAL);
  std::string error = handle == nullptr ? LastDlError() : "";
  if (handle == nullptr) {
    const std::string beside_cudart = BesideCudart();
    if (!beside_cudart.empty()) {
      handle = dlopen(beside_cudart.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) absl::StrAppend(&error, "; ", LastDlError());
    }
  }
  if (handle == nullptr) {
    loaded.status = absl::FailedPreconditionError(
        absl::StrCat("cannot load cuBLAS (", kLibraryName, "): ", error,
                     "; the CUDA toolkit's lib64 must be on the library path"));
    return loaded;
  }
  CublasLibrary& t = loaded.table;
  std::string missing;
  Resolve(handle, "cublasCreate_v2", &t.Create, &missing);
  Resolve(handle, "cublasDestroy_v2", &t.Destroy, &missing);
  Resolve(handle, "cublasSetStream_v2", &t.SetStream, &missing);
  Resolve(handle, "cublasGemmEx", &t.GemmEx, &missing);
  Resolve(handle, "cublasGemmStridedBatchedEx", &t.GemmStridedBatchedEx, &missing);
  Resolve(handle, "cublasGetStatusName", &t.GetStatusName, &missing);
  Resolve(handle, "cublasGetStatusString", &t.GetStatusString, &missing);
  if (!missing.empty()) {
    loaded.status = absl::FailedPreconditionError(
        absl::StrCat(kLibraryName, " lacks ", missing, " (a cuBLAS older than the headers?)"));
  }
  return loaded;
}

absl::once_flag once;
Loaded* loaded = nullptr;
std::atomic<const CublasLibrary*> ready{nullptr};

}  // namespace

const char* CublasLibraryName() { return kLibraryName; }

absl::StatusOr<const CublasLibrary*> LoadCublas() {
  absl::call_once(once, [] {
    loaded = new Loaded(Open());
    if (loaded->status.ok()) ready.store(&loaded->table, std::memory_order_release);
  });
  if (!loaded->status.ok()) return loaded->status;
  return &loaded->table;
}

const CublasLibrary* LoadedCublas() { return ready.load(std::memory_order_acquire); }

}  // namespace dtrain::kernels::cuda
