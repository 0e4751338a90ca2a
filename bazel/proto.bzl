"""cc_grpc_proto_library: .proto -> C++ messages and gRPC stubs with Debian's protoc and
grpc_cpp_plugin (no protobuf/gRPC source repositories needed, so the build stays offline).

    cc_grpc_proto_library(name = "model_cc_proto", srcs = ["model.proto"])

generates model.pb.{h,cc} and model.grpc.pb.{h,cc}; include "proto/model.pb.h".
Imports resolve from the workspace root: import "proto/model.proto";

services = False for files that define no service: only the messages are generated and the
library links protobuf, not gRPC (so dtrain-local, which uses job specs, links no gRPC).
With services, NAME_messages is the messages alone (protobuf, no gRPC: the coordinator's pure
policies use coordinator.proto's messages); NAME is those and the stubs. Without, NAME_messages
is NAME.
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
    messages = [o for o in outs if not o.endswith((".grpc.pb.h", ".grpc.pb.cc"))]
    if not services:
        native.cc_library(
            name = name,
            srcs = [o for o in messages if o.endswith(".cc")],
            hdrs = [o for o in messages if o.endswith(".h")],
            deps = deps + ["//bazel/system:protobuf"],
            **kwargs
        )
        native.alias(name = name + "_messages", actual = name, **kwargs)
        return

    # The messages alone, for code that uses them without the service (no gRPC linked).
    native.cc_library(
        name = name + "_messages",
        srcs = [o for o in messages if o.endswith(".cc")],
        hdrs = [o for o in messages if o.endswith(".h")],
        deps = [d + "_messages" for d in deps] + ["//bazel/system:protobuf"],
        **kwargs
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".grpc.pb.cc")],
        hdrs = [o for o in outs if o.endswith(".grpc.pb.h")],
        deps = [name + "_messages"] + deps + ["//bazel/system:grpc"],
        **kwargs
    )
