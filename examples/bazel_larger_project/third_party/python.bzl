"""The larger project's own Python: its toolchain and its pip hub.

These stand for whatever a real project already has (rules_python's
toolchains and pip.parse, or its own rules). entangle_jax is told about them
in WORKSPACE and brings none of its own.

`project_python` finds the project's interpreter, by version, once, and
exposes //:toolchain, //:python_headers and //:python3 (the interpreter
file). Offline, it cannot download one as rules_python's toolchains would:
it takes `$LARGER_PROJECT_PYTHON`, else a `python<version>` on PATH that
runs (a pyenv shim of a version that is not selected does not), else the
newest patch release in pyenv's versions folder, and fails naming where it
looked.
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

_PROBE = """
import os, sys, sysconfig
print("%d.%d" % sys.version_info[:2])
print(os.path.realpath(sys.executable))
print(sysconfig.get_paths()["include"])
"""

def _release(path):
    """Sort key of a pyenv version folder: 3.12.10 after 3.12.9."""
    return [int(part) if part.isdigit() else 0 for part in path.basename.split(".")]

def _candidates(ctx, version):
    override = ctx.os.environ.get("LARGER_PROJECT_PYTHON")
    if override:
        return [override]
    found = []
    on_path = ctx.which("python" + version)
    if on_path:
        found.append(str(on_path))
    root = ctx.os.environ.get("PYENV_ROOT") or ctx.os.environ.get("HOME", "") + "/.pyenv"
    versions = ctx.path(root + "/versions")
    if versions.exists:
        releases = [d for d in versions.readdir() if d.basename.startswith(version + ".")]
        for d in sorted(releases, key = _release, reverse = True):
            found.append(str(d) + "/bin/python" + version)
    return found

def _project_python_impl(ctx):
    version = ctx.attr.version
    tried = _candidates(ctx, version)
    lines = None
    for candidate in tried:
        probe = ctx.execute([candidate, "-c", _PROBE])
        out = probe.stdout.strip().splitlines()
        if probe.return_code == 0 and out and out[0] == version:
            lines = out
            break
    if not lines:
        fail("{}: no working Python {} (tried: {}). Set LARGER_PROJECT_PYTHON to its path, put python{} on PATH, or install it with pyenv.".format(
            ctx.name,
            version,
            ", ".join(tried) or "nothing found",
            version,
        ))
    executable, include = lines[1], lines[2]
    ctx.symlink(executable, "python3")
    ctx.symlink(include, "include")
    ctx.file("BUILD.bazel", _PYTHON_BUILD.format(executable = executable))
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))

project_python = repository_rule(
    implementation = _project_python_impl,
    attrs = {"version": attr.string(mandatory = True, doc = "major.minor, e.g. 3.12")},
    environ = ["LARGER_PROJECT_PYTHON", "PYENV_ROOT"],
    doc = "The project's interpreter, found once by version, as a toolchain and headers.",
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
