"""cc_grpc_proto_library: .proto -> C++ messages and gRPC stubs with Debian's protoc and
grpc_cpp_plugin (no protobuf/gRPC source repositories needed, so the build stays offline).

    cc_grpc_proto_library(name = "model_cc_proto", srcs = ["model.proto"])

generates model.pb.{h,cc} and model.grpc.pb.{h,cc}; include "proto/model.pb.h".
Imports resolve from the workspace root: import "proto/model.proto";

services = False for files that define no service: only the messages are generated and the
library links protobuf, not gRPC (so dtrain-local, which uses job specs, links no gRPC).
"""

def cc_grpc_proto_library(name, srcs, deps = [], services = True, **kwargs):
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if services:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    native.genrule(
        name = name + "_protoc",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = " ".join([
            "protoc",
            "-I.",
            "--cpp_out=$(GENDIR)",
        ] + ([
            "--grpc_out=$(GENDIR)",
            "--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)",
        ] if services else []) + ["$(location %s)" % s for s in srcs]),
        message = "protoc " + " ".join(srcs),
    )
    # Transitive .proto files, so imports of imports resolve in the sandbox.
    native.filegroup(name = name + "_srcs", srcs = srcs + [d + "_srcs" for d in deps])
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//bazel/system:grpc" if services else "//bazel/system:protobuf"],
        **kwargs
    )
