"""Repository rule that finds a local CUDA toolkit, offline.

Creates @local_cuda with:
  defs.bzl      CUDA_AVAILABLE (bool), CUDA_PATH (string)
  BUILD         :cuda_runtime (cudart + cuBLAS link flags and headers) when available
When no toolkit is found the build goes on CPU-only and says so once.
"""

def _cuda_configure_impl(rctx):
    cuda_path = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = rctx.path(cuda_path + "/bin/nvcc")
    available = nvcc.exists and rctx.os.environ.get("DTRAIN_DISABLE_CUDA", "") != "1"
    rctx.file("defs.bzl", "CUDA_AVAILABLE = %s\nCUDA_PATH = %r\n" % (available, cuda_path))
    if not available:
        why = "DTRAIN_DISABLE_CUDA=1" if nvcc.exists else "no nvcc at %s/bin" % cuda_path
        print("dtrain: building the CPU backend only (%s)." % why)
        rctx.file("BUILD", "")
        return
    rctx.symlink(cuda_path + "/include", "include")
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_runtime",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/nv/**"]),
    includes = ["include"],
    linkopts = [
        "-L{p}/lib64",
        "-Wl,-rpath,{p}/lib64",
        # Not -lcublas: kernels/cuda/cublas_library.h opens it when a CUDA backend is made.
        "-lcudart",
    ],
)
""".format(p = cuda_path))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "DTRAIN_DISABLE_CUDA"],
    local = True,
)
