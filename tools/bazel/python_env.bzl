"""Locked Python packages, installed by the named interpreter's pip.

`python_env` installs the hashed lock (`requirements.lock`, the pins the
pip/uv side uses; or only the entries named in `packages` and what they
need) into `site/`, with
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
# The packages' own test suites (numpy's, scipy's: a tenth of their files)
# stay out too: every file here is a symlink in each test's runfiles and
# sandbox.
py_library(
    name = "site",
    data = glob(
        ["site/**"],
        exclude = ["site/**/* *", "site/bin/**", "site/**/tests/**"],
    ),
    imports = ["site"],
)

cc_library(
    name = "pybind11",
    hdrs = glob(["site/pybind11/include/**/*.h"]),
    includes = ["site/pybind11/include"],
)
"""

def _normalize(name):
    return name.strip().lower().replace("_", "-").replace(".", "-")

def _parse_lock(lock_text):
    """The lock's entries in order, each {name, lines, via}.

    `lines` are the requirement line and its hashes; `via` are the packages
    that need this one, from the comments `uv export` writes under it.
    """
    entries = []
    for line in lock_text.splitlines():
        stripped = line.strip()
        if line and not line[0].isspace() and not line.startswith("#"):
            entries.append({"lines": [line], "name": _normalize(line.split("==")[0]), "via": []})
        elif not entries:
            continue
        elif stripped.startswith("--hash"):
            entries[-1]["lines"].append(line)
        elif stripped.startswith("# via "):
            entries[-1]["via"].append(_normalize(stripped[len("# via "):]))
        elif stripped.startswith("#   "):
            entries[-1]["via"].append(_normalize(stripped[len("#   "):]))
    return entries

def _lock_entries(lock_text, packages):
    """The lock's entries for `packages` and everything they need.

    Each entry is a requirement line and its hashes; what a package needs is
    read from the lock's `# via` comments.
    """
    entries = _parse_lock(lock_text)
    wanted = {_normalize(p): True for p in packages}
    missing = [p for p in wanted if p not in [e["name"] for e in entries]]
    if missing:
        fail("python_env: the lock has no {} (packages = {})".format(missing, packages))

    # Starlark has no while: each pass adds at least one package or stops,
    # so as many passes as entries reach the fixed point.
    for _ in entries:
        added = [e["name"] for e in entries if e["name"] not in wanted and [v for v in e["via"] if v in wanted]]
        if not added:
            break
        for name in added:
            wanted[name] = True
    return "\n".join(["\n".join(e["lines"]) for e in entries if e["name"] in wanted]) + "\n"

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
        "packages": attr.string_list(doc = "Install only these and what they need (default: the whole lock)."),
        "requirements": attr.label(default = "//:requirements.lock", allow_single_file = True),
    }),
    environ = INTERPRETER_ENVIRON,
    doc = "Locked Python packages and a toolchain for the named interpreter.",
)
