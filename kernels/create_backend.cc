#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef DTRAIN_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace dtrain::kernels {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> CreateCuda(int ordinal) {
#ifdef DTRAIN_WITH_CUDA
  return CreateCudaBackend(ordinal);
#else
  (void)ordinal;
  return absl::FailedPreconditionError(
      "--device=cuda: this dtrain build has no CUDA backend (no CUDA toolkit at build time); "
      "use --device=cpu or rebuild where /usr/local/cuda exists");
#endif
}

bool CudaDevicePresent() {
#ifdef DTRAIN_WITH_CUDA
  return CudaDeviceCount() > 0;
#else
  return false;
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view device,
                                                       int cpu_threads) {
  if (device == "cpu") return CreateCpuBackend(cpu_threads);
  if (device == "auto") {
    if (CudaDevicePresent()) return CreateCuda(0);
    return CreateCpuBackend(cpu_threads);
  }
  if (device == "cuda") return CreateCuda(0);
  if (absl::StartsWith(device, "cuda:")) {
    int ordinal = -1;
    if (!absl::SimpleAtoi(device.substr(5), &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device \"", device, "\": expected cuda:N with N a GPU index >= 0"));
    }
    return CreateCuda(ordinal);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device \"", device, "\": expected cpu, cuda, cuda:N or auto"));
}

}  // namespace dtrain::kernels
