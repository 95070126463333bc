"""The local CUDA toolkit, for `--config=cuda` builds.

Looks in $CUDA_PATH, else /usr/local/cuda. Exposes //:defs.bzl with NVCC,
the compiler's absolute path (nvcc finds its headers relative to where it is
installed, so it cannot run from a symlink in the sandbox), and
//:cudart_static, the static CUDA runtime. Without a toolkit, NVCC names a
command that fails with a message, so CPU builds never need CUDA.
"""

_FOUND = """
package(default_visibility = ["//visibility:public"])

cc_import(
    name = "cudart_static",
    static_library = "lib/libcudart_static.a",
)

"""

_MISSING = """
package(default_visibility = ["//visibility:public"])

cc_library(name = "cudart_static")
"""

def _cuda_toolkit_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    nvcc = ctx.path(root + "/bin/nvcc")
    if not nvcc.exists:
        ctx.file("BUILD.bazel", _MISSING)
        nvcc_command = "sh -c 'echo no CUDA toolkit in {}: set CUDA_PATH >&2; exit 1' --".format(root)
    else:
        lib = ctx.path(root + "/lib64")
        ctx.symlink(lib if lib.exists else root + "/lib", "lib")
        ctx.file("BUILD.bazel", _FOUND)
        nvcc_command = str(nvcc.realpath)
    ctx.file("defs.bzl", 'NVCC = "{}"\n'.format(nvcc_command))
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))

cuda_toolkit = repository_rule(
    implementation = _cuda_toolkit_impl,
    environ = ["CUDA_PATH"],
    doc = "nvcc and the static CUDA runtime of the local toolkit, if any.",
)
