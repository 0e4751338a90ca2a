"""cuda_library: compiles .cu files with nvcc into a cc_library (sm_80 and sm_90).

Each .cu becomes one position-independent object through a genrule; no relocatable device code,
so the host linker links them like any other object. Headers (.cuh/.h) the .cu files include are
listed in hdrs and made visible to nvcc through the genrule's srcs.
"""

load("@local_cuda//:defs.bzl", "CUDA_PATH")

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "--use_fast_math",
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-Xcompiler=-fPIC",
    "-Xcompiler=-Wall",
]

def cuda_library(name, srcs, hdrs = [], deps = [], nvcc_deps = [], **kwargs):
    """srcs: .cu files; hdrs: headers they (and users) include; nvcc_deps: header-only labels."""
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs + nvcc_deps,
            outs = [obj],
            cmd = "{nvcc} {flags} -I. -I$(GENDIR) -c $(location {src}) -o $@".format(
                nvcc = CUDA_PATH + "/bin/nvcc",
                flags = " ".join(NVCC_FLAGS),
                src = src,
            ),
            message = "nvcc " + src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda_runtime"],
        **kwargs
    )
