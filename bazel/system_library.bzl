"""Wraps libraries installed by Debian's packages as cc_library targets.

`system_library(name, modules)` runs pkg-config for the modules and writes a
repository with one `cc_library` named `lib` carrying their defines, include
directories and link options, so BUILD files never hand-write linkopts.
"""

def _split_flags(text):
    return [f for f in text.strip().replace("\n", " ").split(" ") if f]

def _system_library_impl(ctx):
    pkg_config = ctx.which("pkg-config")
    if pkg_config == None:
        fail("pkg-config not found: run scripts/install_deps.sh")
    cflags = ctx.execute([pkg_config, "--cflags"] + ctx.attr.modules)
    libs = ctx.execute([pkg_config, "--libs"] + ctx.attr.modules)
    if cflags.return_code != 0 or libs.return_code != 0:
        fail("pkg-config failed for %s (run scripts/install_deps.sh): %s%s" %
             (ctx.attr.modules, cflags.stderr, libs.stderr))

    defines = []
    includes = []
    for flag in _split_flags(cflags.stdout):
        if flag.startswith("-D"):
            defines.append(flag[2:])
        elif flag.startswith("-I"):
            # Headers outside the workspace must live inside the repository
            # for `includes` to reach dependents: link the directory in.
            link = "include_%d" % len(includes)
            ctx.symlink(flag[2:], link)
            includes.append(link)
    linkopts = _split_flags(libs.stdout) + ctx.attr.extra_linkopts

    ctx.file("BUILD.bazel", """\
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "lib",
    hdrs = glob([{hdr_globs}]),
    defines = {defines},
    includes = {includes},
    linkopts = {linkopts},
)
""".format(
        hdr_globs = ", ".join(['"%s/**"' % i for i in includes]),
        defines = repr(defines),
        includes = repr(includes),
        linkopts = repr(linkopts),
    ))

system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {
        "modules": attr.string_list(mandatory = True),
        "extra_linkopts": attr.string_list(default = []),
    },
    environ = ["PKG_CONFIG_PATH"],
    local = True,
)
