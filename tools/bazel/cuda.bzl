"""The local CUDA toolkit, for `--config=cuda` builds.

`cuda_toolkit` (a repository rule) looks in $CUDA_PATH, else
/usr/local/cuda, and exposes //:nvcc and //:cudart_static (the static CUDA
runtime). `cuda_object` compiles .cu files with that nvcc.

Where an absolute path cannot be avoided: nvcc finds its own headers and
libraries relative to where it is installed, so it cannot run from a copy or
a symlink in the sandbox. //:nvcc is therefore a one-line wrapper, written
when the repository is fetched, that runs the toolkit's nvcc by its absolute
path. That path lives only in the fetched repository (like Bazel's own C++
toolchain detection), never in a BUILD file or a genrule command, and
changing $CUDA_PATH refetches it. Without a toolkit, //:nvcc fails with a
message, so CPU builds never need CUDA.
"""

load("@rules_cc//cc/common:cc_common.bzl", "cc_common")
load("@rules_cc//cc/common:cc_info.bzl", "CcInfo")
load(":cc.bzl", "CC_COPTS")

_FOUND = """
load("@rules_cc//cc:defs.bzl", "cc_import")

package(default_visibility = ["//visibility:public"])

exports_files(["nvcc"])

cc_import(
    name = "cudart_static",
    static_library = "lib/libcudart_static.a",
)
"""

_MISSING = """
load("@rules_cc//cc:defs.bzl", "cc_library")

package(default_visibility = ["//visibility:public"])

exports_files(["nvcc"])

cc_library(name = "cudart_static")
"""

def _cuda_toolkit_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    nvcc = ctx.path(root + "/bin/nvcc")
    if nvcc.exists:
        lib = ctx.path(root + "/lib64")
        ctx.symlink(lib if lib.exists else root + "/lib", "lib")
        ctx.file("BUILD.bazel", _FOUND)
        command = 'exec "{}" "$@"'.format(nvcc.realpath)
    else:
        ctx.file("BUILD.bazel", _MISSING)
        command = 'echo "no CUDA toolkit in {}: set CUDA_PATH" >&2; exit 1'.format(root)
    ctx.file("nvcc", "#!/bin/sh\n" + command + "\n", executable = True)
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))

cuda_toolkit = repository_rule(
    implementation = _cuda_toolkit_impl,
    environ = ["CUDA_PATH"],
    doc = "nvcc and the static CUDA runtime of the local toolkit, if any.",
)

def _cuda_object_impl(ctx):
    compilation = cc_common.merge_cc_infos(
        cc_infos = [d[CcInfo] for d in ctx.attr.deps],
    ).compilation_context
    obj = ctx.actions.declare_file(ctx.label.name + ".o")
    args = ctx.actions.args()
    args.add_all(["-c"] + CC_COPTS + ["-O2", "-Xcompiler", "-fPIC"])
    args.add_all([
        "--generate-code=arch=compute_{0},code=[sm_{0},compute_{0}]".format(arch)
        for arch in ctx.attr.gpu_architectures
    ])
    args.add_all(compilation.includes, before_each = "-I")
    args.add_all(compilation.quote_includes, before_each = "-I")
    args.add_all(compilation.system_includes, before_each = "-isystem")
    args.add("-o", obj)
    args.add(ctx.file.src)
    ctx.actions.run(
        executable = ctx.executable._nvcc,
        arguments = [args],
        inputs = depset([ctx.file.src] + ctx.files.hdrs, transitive = [compilation.headers]),
        outputs = [obj],
        mnemonic = "Nvcc",
        progress_message = "Compiling {} with nvcc".format(ctx.file.src.short_path),
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([obj]))]

cuda_object = rule(
    implementation = _cuda_object_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo], doc = "Header libraries the source includes."),
        "gpu_architectures": attr.string_list(default = ["80", "90"]),
        "hdrs": attr.label_list(allow_files = [".h"]),
        "src": attr.label(allow_single_file = [".cu"], mandatory = True),
        "_nvcc": attr.label(
            default = "@entangle_jax_cuda//:nvcc",
            executable = True,
            allow_single_file = True,
            cfg = "exec",
        ),
    },
    doc = "One .cu file compiled to a relocatable object with the toolkit's nvcc.",
)
