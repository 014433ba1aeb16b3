"""C++ code for a .proto with gRPC services, made by Debian's protoc.

The Starlark proto rules need a newer Bazel or downloads (see the shared
notes on Bazel offline), so a genrule runs /usr/bin/protoc with
/usr/bin/grpc_cpp_plugin.
"""

def grpc_cc_proto(name, src):
    """A cc_library `name` of the messages and gRPC stubs of `src`.

    Args:
      name: the library's name.
      src: the .proto file, in this package.
    """
    base = src[:-len(".proto")]
    hdrs = [base + ".pb.h", base + ".grpc.pb.h"]
    srcs = [base + ".pb.cc", base + ".grpc.pb.cc"]
    native.genrule(
        name = name + "_codegen",
        srcs = [src],
        outs = hdrs + srcs,
        cmd = "/usr/bin/protoc --proto_path=. " +
              "--cpp_out=$(GENDIR) --grpc_out=$(GENDIR) " +
              "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin " +
              "$(location " + src + ")",
    )
    native.cc_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = ["@system_grpc//:lib"],
    )
