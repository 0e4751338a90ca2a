"""The CUDA backend's targets, defined only when @local_cuda found a toolkit.

A macro because Bazel 4 allows `if` only in .bzl files; kernels/cuda/BUILD calls it once. Without
CUDA the package is empty and //kernels:backend does not depend on it.
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE")
load("//bazel:cuda.bzl", "cuda_library")

# One .cu/.cuh pair per op; see README.md.
_OPS = [
    "adamw",  # + SquaredNorm, Scale
    "attention",
    "cross_entropy",
    "embedding",
    "gelu",
    "layernorm",
    "matmul",  # + Gemm
    "residual",
]

def cuda_backend_targets():
    if not CUDA_AVAILABLE:
        return

    # cuBLAS through dlopen when the first backend is made (cublas_library.h says why).
    native.cc_library(
        name = "cublas_library",
        srcs = ["cublas_library.cc"],
        hdrs = ["cublas_library.h"],
        linkopts = ["-ldl"],
        deps = [
            "//bazel/system:absl",
            "@local_cuda//:cuda_runtime",
        ],
    )

    # Host-compiled code (cuda_backend.cc) and nvcc-compiled code (.cu) share these headers.
    native.cc_library(
        name = "cuda_check",
        hdrs = ["cuda_check.h"],
        deps = [
            ":cublas_library",
            "//bazel/system:absl",
            "//kernels:arg_check",
            "@local_cuda//:cuda_runtime",
        ],
    )

    cuda_library(
        name = "cuda_kernels",
        srcs = [op + ".cu" for op in _OPS],
        hdrs = [op + ".cuh" for op in _OPS] + [
            "column_sums.cuh",
            "cublas_library.h",
            "cuda_check.h",
            "reduce.cuh",
        ],
        nvcc_deps = [
            "//common:device_scratch.h",
            "//common:status_macros.h",
            "//kernels:backend.h",
            "//kernels:common/arg_check.h",
            "//kernels:common/elementwise.h",
        ],
        deps = [
            ":cuda_check",
            "//bazel/system:absl",
            "//common:device_scratch",
            "//common:status_macros",
            "//kernels:backend_interface",
            "//kernels:elementwise",
        ],
    )

    native.cc_library(
        name = "cuda_backend",
        srcs = ["cuda_backend.cc"],
        hdrs = ["cuda_backend.h"],
        deps = [
            ":cuda_check",
            ":cuda_kernels",
            "//bazel/system:absl",
            "//common:status_macros",
            "//kernels:backend_interface",
            "@local_cuda//:cuda_runtime",
        ],
    )

    # Runs without a GPU: error conversion, creation errors, argument checks (see the file).
    native.cc_test(
        name = "cuda_backend_test",
        size = "small",
        srcs = ["cuda_backend_test.cc"],
        deps = [
            ":cuda_backend",
            ":cuda_check",
            ":cuda_kernels",
            "//bazel/system:absl",
            "//bazel/system:gtest_main",
            "//kernels:backend_interface",
        ],
    )
