"""The Python that Bazel builds and tests with, and its pinned packages.

`python_env` is a repository rule. It finds the interpreter (the
`ENTANGLE_JAX_PYTHON` environment variable, else `python3` on PATH), installs
the hashed lock (`requirements.lock`, the same pins the pip/uv side uses) into
`site/` with that interpreter's pip, and exposes:

  //:toolchain       a Python 3 toolchain running that interpreter
  //:site            py_library of the installed packages
  //:python_headers  cc_library of the interpreter's C headers
  //:pybind11        cc_library of pybind11's headers (from the lock)
  //:metadata.bzl    DISTRIBUTION, VERSION, SUMMARY, REQUIRES,
                     REQUIRES_PYTHON (from pyproject.toml), and
                     PYTHON_TAG, PLATFORM_TAG, EXT_SUFFIX (from the
                     interpreter), for the extension's name and the wheel
"""

_PROBE = """
import json, sys, sysconfig, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print(json.dumps({
    "executable": sys.executable,
    "include": sysconfig.get_paths()["include"],
    "tag": "cp%d%d" % sys.version_info[:2],
    "requires": project.get("dependencies", []),
    "requires_python": project.get("requires-python", ""),
    "name": project["name"],
    "version": project["version"],
    "summary": project.get("description", ""),
    "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
    "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
}))
"""

_BUILD = """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

py_runtime(
    name = "python3_runtime",
    interpreter_path = "{executable}",
    python_version = "PY3",
    # Bazel 4's default stub shebang asks for `python`, which may not exist.
    stub_shebang = "#!{executable}",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":python3_runtime",
)

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)

# Runfiles cannot hold names with spaces (some packages ship such files).
py_library(
    name = "site",
    data = glob(
        ["site/**"],
        exclude = ["site/**/* *", "site/bin/**"],
    ),
    imports = ["site"],
)

cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)

cc_library(
    name = "pybind11",
    hdrs = glob(["site/pybind11/include/**/*.h"]),
    includes = ["site/pybind11/include"],
    deps = [":python_headers"],
)

exports_files(["metadata.bzl"])
"""

def _fail_on(result, what):
    if result.return_code != 0:
        fail("python_env: {} failed:\\n{}\\n{}".format(what, result.stdout, result.stderr))

def _python_env_impl(ctx):
    python = ctx.os.environ.get("ENTANGLE_JAX_PYTHON") or ctx.which("python3")
    if not python:
        fail("python_env: no python3 on PATH; set ENTANGLE_JAX_PYTHON")
    pyproject = ctx.path(ctx.attr.pyproject)
    probe = ctx.execute([python, "-c", _PROBE, str(pyproject)])
    _fail_on(probe, "probing " + str(python))
    info = json.decode(probe.stdout)
    ctx.symlink(info["include"], "python_include")

    lock = ctx.path(ctx.attr.requirements)
    install = ctx.execute(
        [
            info["executable"],
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--require-hashes",
            "--target",
            "site",
            "-r",
            str(lock),
        ],
        timeout = 1800,
        quiet = False,
    )
    _fail_on(install, "installing " + str(lock))

    ctx.file("BUILD.bazel", _BUILD.format(executable = info["executable"]))
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))
    ctx.file("metadata.bzl", "\n".join([
        '"""Project metadata, generated from pyproject.toml."""',
        "",
        "DISTRIBUTION = {}".format(repr(info["name"].replace("-", "_"))),
        "VERSION = {}".format(repr(info["version"])),
        "REQUIRES = {}".format(repr(info["requires"])),
        "REQUIRES_PYTHON = {}".format(repr(info["requires_python"])),
        "SUMMARY = {}".format(repr(info["summary"])),
        "PYTHON_TAG = {}".format(repr(info["tag"])),
        "PLATFORM_TAG = {}".format(repr(info["platform"])),
        "EXT_SUFFIX = {}".format(repr(info["ext_suffix"])),
        "",
    ]))

python_env = repository_rule(
    implementation = _python_env_impl,
    attrs = {
        "pyproject": attr.label(default = "//:pyproject.toml", allow_single_file = True),
        "requirements": attr.label(default = "//:requirements.lock", allow_single_file = True),
    },
    environ = ["ENTANGLE_JAX_PYTHON", "PATH"],
    doc = "The interpreter, its headers, and the locked Python packages.",
)
