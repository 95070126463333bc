"""The larger project's own Python: its toolchain and its pip hub.

These stand for whatever a real project already has (rules_python's
toolchains and pip.parse, or its own rules). entangle_jax is told about them
in WORKSPACE and brings none of its own.

`project_python` names the project's interpreter once and exposes
//:toolchain, //:python_headers and //:python3 (the interpreter file).
`project_pip_hub` installs the project's hashed lock with that interpreter
and exposes //:jax (jax, jaxlib and their dependencies), //:absl_py,
//:pybind11 and //:xla_ffi (the FFI headers its own jaxlib ships).
"""

_PYTHON_BUILD = """
load("@rules_cc//cc:defs.bzl", "cc_library")
load("@rules_python//python:defs.bzl", "py_runtime", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

exports_files(["python3"])

py_runtime(
    name = "runtime",
    interpreter_path = "{executable}",
    python_version = "PY3",
    stub_shebang = "#!{executable}",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":runtime",
)

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)

cc_library(
    name = "python_headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)
"""

def _run(ctx, command, what):
    result = ctx.execute(command, timeout = 1800)
    if result.return_code != 0:
        fail("{}: {} failed:\n{}{}".format(ctx.name, what, result.stdout, result.stderr))
    return result.stdout

def _project_python_impl(ctx):
    found = ctx.which(ctx.attr.interpreter) if "/" not in ctx.attr.interpreter else ctx.path(ctx.attr.interpreter)
    if not found:
        fail("{}: no interpreter {}".format(ctx.name, ctx.attr.interpreter))
    out = _run(ctx, [found, "-c", "import sys, sysconfig; print(sys.executable); print(sysconfig.get_paths()['include'])"], "probing")
    executable, include = out.strip().splitlines()
    ctx.symlink(executable, "python3")
    ctx.symlink(include, "include")
    ctx.file("BUILD.bazel", _PYTHON_BUILD.format(executable = executable))
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))

project_python = repository_rule(
    implementation = _project_python_impl,
    attrs = {"interpreter": attr.string(mandatory = True)},
    doc = "The project's interpreter, named once, as a toolchain and headers.",
)

_HUB_BUILD = """
load("@rules_cc//cc:defs.bzl", "cc_library")
load("@rules_python//python:defs.bzl", "py_library")

package(default_visibility = ["//visibility:public"])

_NO_SPACES = ["site/**/* *", "site/bin/**"]

py_library(
    name = "jax",
    data = glob(
        [
            "site/jax/**",
            "site/jax-*/**",
            "site/jaxlib/**",
            "site/jaxlib-*/**",
            "site/ml_dtypes/**",
            "site/ml_dtypes-*/**",
            "site/numpy/**",
            "site/numpy-*/**",
            "site/numpy.libs/**",
            "site/opt_einsum/**",
            "site/opt_einsum-*/**",
            "site/scipy/**",
            "site/scipy-*/**",
            "site/scipy.libs/**",
        ],
        exclude = _NO_SPACES,
    ),
    imports = ["site"],
)

py_library(
    name = "absl_py",
    data = glob(["site/absl/**", "site/absl_py-*/**"], exclude = _NO_SPACES),
    imports = ["site"],
)

cc_library(
    name = "pybind11",
    hdrs = glob(["site/pybind11/include/**/*.h"]),
    includes = ["site/pybind11/include"],
)

# The project's own XLA: the FFI headers of the jaxlib in its lock.
cc_library(
    name = "xla_ffi",
    hdrs = glob(["site/jaxlib/include/xla/ffi/api/*.h"]),
    includes = ["site/jaxlib/include"],
)
"""

def _project_pip_hub_impl(ctx):
    python = ctx.path(ctx.attr.python)
    _run(ctx, [
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--require-hashes",
        "--target",
        "site",
        "-r",
        ctx.path(ctx.attr.lock),
    ], "installing the lock")
    ctx.file("BUILD.bazel", _HUB_BUILD)
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))

project_pip_hub = repository_rule(
    implementation = _project_pip_hub_impl,
    attrs = {
        "lock": attr.label(mandatory = True, allow_single_file = True),
        "python": attr.label(mandatory = True, allow_single_file = True),
    },
    doc = "The project's locked packages, one py_library per use.",
)
