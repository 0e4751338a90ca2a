#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/staging_backend.h"
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

// Why "auto" gave the CPU, for errors about it.
#ifdef DTRAIN_WITH_CUDA
constexpr char kAutoChoseTheCpu[] = " (--device=auto found no CUDA GPU)";
#else
constexpr char kAutoChoseTheCpu[] = " (--device=auto: this dtrain build has no CUDA backend)";
#endif

// `backend` computing in `precision` (Backend::SetMatmulPrecision: the CPU backends compute every
// GEMM in fp32, and asking them for less is an error rather than a setting silently ignored).
// `why` says how the CPU was chosen, when not by name.
absl::StatusOr<std::unique_ptr<Backend>> WithPrecision(
    absl::StatusOr<std::unique_ptr<Backend>> backend, MatmulPrecision precision,
    absl::string_view why = "") {
  if (!backend.ok()) return backend;
  absl::Status s = (*backend)->SetMatmulPrecision(precision);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(s.message(), why));
  return backend;
}

}  // namespace

absl::StatusOr<MatmulPrecision> ParseMatmulPrecision(absl::string_view name) {
  for (MatmulPrecision p :
       {MatmulPrecision::kFp32, MatmulPrecision::kTf32, MatmulPrecision::kBf16}) {
    if (name == MatmulPrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown matmul precision \"", name, "\": expected fp32, tf32 or bf16"));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view device, int cpu_threads,
                                                       MatmulPrecision precision) {
  if (device == "cpu") return WithPrecision(CreateCpuBackend(cpu_threads), precision);
  if (device == "cpu-staging") {
    return WithPrecision(CreateStagingCpuBackend(cpu_threads), precision);
  }
  if (device == "auto") {
    if (CudaDevicePresent()) return WithPrecision(CreateCuda(0), precision);
    return WithPrecision(CreateCpuBackend(cpu_threads), precision, kAutoChoseTheCpu);
  }
  if (device == "cuda") return WithPrecision(CreateCuda(0), precision);
  if (absl::StartsWith(device, "cuda:")) {
    int ordinal = -1;
    if (!absl::SimpleAtoi(device.substr(5), &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device \"", device, "\": expected cuda:N with N a GPU index >= 0"));
    }
    return WithPrecision(CreateCuda(ordinal), precision);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device \"", device, "\": expected cpu, cpu-staging, cuda, cuda:N or auto"));
}

}  // namespace dtrain::kernels
