"""Locked Python packages, installed by the named interpreter's pip.

`python_env` installs the hashed lock (`requirements.lock`, the pins the
pip/uv side uses; or only the entries named in `packages`) into `site/`, with
pip's caches off and its other writes kept inside the repository directory
(see interpreter.bzl, pip_environment), and
exposes:

  //:site       py_library of the installed packages
  //:pybind11   cc_library of pybind11's headers (when the lock has it)
  //:toolchain  a Python 3 toolchain running the same interpreter
"""

load(":interpreter.bzl", "INTERPRETER_ATTRS", "INTERPRETER_ENVIRON", "PIP_SCRATCH", "fail_on", "pip_environment", "resolve_interpreter")

_BUILD = """
load("@rules_cc//cc:defs.bzl", "cc_library")
load("@rules_python//python:defs.bzl", "py_library", "py_runtime", "py_runtime_pair")

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
    name = "pybind11",
    hdrs = glob(["site/pybind11/include/**/*.h"]),
    includes = ["site/pybind11/include"],
)
"""

def _lock_entries(lock_text, packages):
    """The lock's entries (a requirement line and its hashes) for `packages`."""
    wanted = [p.lower().replace("_", "-") for p in packages]
    entries = []
    current = None
    for line in lock_text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            name = line.split("==")[0].strip().lower().replace("_", "-")
            current = [line] if name in wanted else None
            if current != None:
                entries.append(current)
        elif current != None and line.strip().startswith("--hash"):
            current.append(line)
    found = [e[0].split("==")[0].strip() for e in entries]
    if len(found) != len(wanted):
        fail("python_env: the lock lacks some of {} (found {})".format(packages, found))
    return "\n".join(["\n".join(e) for e in entries]) + "\n"

def _python_env_impl(ctx):
    python = resolve_interpreter(ctx)
    probe = ctx.execute([python, "-c", "import sys; print(sys.executable)"])
    fail_on(ctx, probe, "running " + str(python))
    executable = probe.stdout.strip()

    requirements = ctx.path(ctx.attr.requirements)
    if ctx.attr.packages:
        ctx.file("requirements.txt", _lock_entries(ctx.read(requirements), ctx.attr.packages))
        requirements = ctx.path("requirements.txt")
    install = ctx.execute(
        [
            executable,
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
            str(requirements),
        ],
        environment = pip_environment(ctx),
        timeout = 1800,
    )
    fail_on(ctx, install, "installing " + str(requirements))
    ctx.delete(PIP_SCRATCH)
    ctx.file("BUILD.bazel", _BUILD.format(executable = executable))
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))

python_env = repository_rule(
    implementation = _python_env_impl,
    attrs = dict(INTERPRETER_ATTRS, **{
        "packages": attr.string_list(doc = "Install only these (default: the whole lock)."),
        "requirements": attr.label(default = "//:requirements.lock", allow_single_file = True),
    }),
    environ = INTERPRETER_ENVIRON,
    doc = "Locked Python packages and a toolchain for the named interpreter.",
)
