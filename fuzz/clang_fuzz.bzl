"""libFuzzer binaries built with Debian's clang beside the gcc build.

Bazel 4's auto-configured C++ toolchain is gcc, and libFuzzer needs clang's
-fsanitize=fuzzer; switching the whole toolchain (a --config with CC=clang)
would leave the fuzzers out of a plain `bazel test //...`. So each source is
compiled by a genrule calling clang++ directly, one object per source (Bazel
caches and parallelizes them), and a last genrule links the objects with the
libFuzzer runtime and the system libraries pkg-config names.
"""

CLANGXX = "/usr/bin/clang++-14"

# Debian's libraries the code under test links (common/, update/ and server/ only).
PKG_CONFIG_MODULES = " ".join([
    "grpc++",
    "protobuf",
    "absl_cord",
    "absl_hash",
    "absl_flat_hash_map",
    "absl_status",
    "absl_statusor",
    "absl_strings",
    "absl_str_format",
    "absl_synchronization",
    "absl_time",
])

# ASan and UBSan (and libFuzzer's coverage, below) on every object, so that
# the code under test is checked, not only the fuzz target; any UB report
# aborts.
SANITIZE = "-fsanitize=address,undefined -fno-sanitize-recover=all"

COPTS = " ".join([
    "-std=c++17",
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    SANITIZE,
    "-Wall",
    "-Wno-sign-compare",
    # update/optimizer.cc means its `&` of bools (no branch).
    "-Wno-bitwise-instead-of-logical",
    "-I.",
    "-I$(GENDIR)",
])

def _object_name(name, src):
    base = src.replace("//", "").lstrip(":").replace(":", "/").replace("/", "_")
    return "%s_objs/%s.o" % (name, base.rsplit(".", 1)[0])

def clang_fuzz_objects(name, srcs, hdrs):
    """Compiles each of `srcs` to an object; returns the objects' labels.

    Args:
      name: prefix of the genrules and objects.
      srcs: source labels (any package; source files are exported).
      hdrs: every header the sources include, generated ones too.
    Returns:
      the object labels, for clang_fuzz_binary.
    """
    objs = []
    for i, src in enumerate(srcs):
        obj = _object_name(name, src)
        native.genrule(
            name = "%s_cc_%d" % (name, i),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = " ".join([
                "test -x %s || { echo '%s missing: run scripts/install_deps.sh' >&2; exit 1; } &&" % (CLANGXX, CLANGXX),
                CLANGXX,
                COPTS,
                "-fsanitize=fuzzer-no-link",
                "$$(pkg-config --cflags %s)" % PKG_CONFIG_MODULES,
                "-c $(location %s) -o $@" % src,
            ]),
            message = "clang++ (fuzzing) %s" % src,
        )
        objs.append(":" + obj)
    return objs

def clang_fuzz_binary(name, objs, testonly = True):
    """Links `objs` into the libFuzzer binary `name`.

    Args:
      name: the binary, a file in this package.
      objs: from clang_fuzz_objects; exactly one defines
        LLVMFuzzerTestOneInput.
      testonly: as for any rule.
    """
    native.genrule(
        name = name + "_link",
        srcs = objs,
        outs = [name],
        cmd = " ".join([
            CLANGXX,
            SANITIZE,
            "-fsanitize=fuzzer",
            "$(SRCS)",
            "-o $@",
            "$$(pkg-config --libs %s)" % PKG_CONFIG_MODULES,
            "-pthread",
        ]),
        message = "linking fuzzer %s" % name,
        executable = True,
        testonly = testonly,
    )
