"""`@entangle_jax_config`: what entangle_jax's BUILD files take from outside.

The BUILD files name their external inputs only through this repository:

  //:jax             py_library providing jax and jaxlib
  //:python_headers  cc_library of the Python C headers
  //:pybind11        cc_library of pybind11's headers
  //:xla_ffi         cc_library of the XLA FFI headers (xla/ffi/api/*.h)
  //:metadata.bzl    DISTRIBUTION, VERSION, SUMMARY, REQUIRES, EXTRA_REQUIRES,
                     ENTRY_POINTS, REQUIRES_PYTHON, LICENSE, LICENSE_FILES
                     (from pyproject.toml) and PYTHON_TAG, PLATFORM_TAG,
                     EXT_SUFFIX (from the named interpreter)

Each of the first four is an alias of the label the setup passed, or of
entangle_jax's own default. The default Python headers are the named
interpreter's include directory, so they need no fetch either.
"""

load(":interpreter.bzl", "INTERPRETER_ATTRS", "INTERPRETER_ENVIRON", "fail_on", "resolve_interpreter")

_PROBE = """
import json, pathlib, sys, sysconfig, tomllib

pyproject = pathlib.Path(sys.argv[1])
project = tomllib.loads(pyproject.read_text())["project"]
print(json.dumps({
    "include": sysconfig.get_paths()["include"],
    "tag": "cp%d%d" % sys.version_info[:2],
    "requires": project.get("dependencies", []),
    "extra_requires": project.get("optional-dependencies", {}),
    # {group: ["name = object reference", ...]}, as entry_points.txt lists them.
    "entry_points": {
        group: ["%s = %s" % item for item in sorted(points.items())]
        for group, points in sorted(project.get("entry-points", {}).items())
    },
    "requires_python": project.get("requires-python", ""),
    "name": project["name"],
    # The one place the version is written: pyproject.toml's static version.
    "version": project["version"],
    "summary": project.get("description", ""),
    # PEP 639: an SPDX expression, and the files (paths from the root).
    "license": project.get("license", ""),
    "license_files": project.get("license-files", []),
    "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
    "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
}))
"""

_BUILD = """
load("@rules_cc//cc:defs.bzl", "cc_library")

package(default_visibility = ["//visibility:public"])

exports_files(["metadata.bzl"])

cc_library(
    name = "interpreter_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)

alias(
    name = "jax",
    actual = "{jax}",
)

alias(
    name = "python_headers",
    actual = "{python_headers}",
)

alias(
    name = "pybind11",
    actual = "{pybind11}",
)

alias(
    name = "xla_ffi",
    actual = "{xla_ffi}",
)
"""

def _project_config_impl(ctx):
    python = resolve_interpreter(ctx)
    probe = ctx.execute([python, "-c", _PROBE, str(ctx.path(ctx.attr.pyproject))])
    fail_on(ctx, probe, "probing " + str(python))
    info = json.decode(probe.stdout)

    ctx.symlink(info["include"], "python_include")
    ctx.file("BUILD.bazel", _BUILD.format(
        jax = ctx.attr.jax,
        python_headers = ctx.attr.python_headers or ":interpreter_headers",
        pybind11 = ctx.attr.pybind11,
        xla_ffi = ctx.attr.xla_ffi,
    ))
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))
    ctx.file("metadata.bzl", "\n".join([
        '"""Project metadata, generated from pyproject.toml and the interpreter."""',
        "",
        "DISTRIBUTION = {}".format(repr(info["name"].replace("-", "_"))),
        "VERSION = {}".format(repr(info["version"])),
        "REQUIRES = {}".format(repr(info["requires"])),
        "EXTRA_REQUIRES = {}".format(repr(info["extra_requires"])),
        "ENTRY_POINTS = {}".format(repr(info["entry_points"])),
        "REQUIRES_PYTHON = {}".format(repr(info["requires_python"])),
        "SUMMARY = {}".format(repr(info["summary"])),
        "LICENSE = {}".format(repr(info["license"])),
        "LICENSE_FILES = {}".format(repr(info["license_files"])),
        "PYTHON_TAG = {}".format(repr(info["tag"])),
        "PLATFORM_TAG = {}".format(repr(info["platform"])),
        "EXT_SUFFIX = {}".format(repr(info["ext_suffix"])),
        "",
    ]))

project_config = repository_rule(
    implementation = _project_config_impl,
    attrs = dict(INTERPRETER_ATTRS, **{
        "jax": attr.string(mandatory = True),
        "pybind11": attr.string(mandatory = True),
        "pyproject": attr.label(default = "//:pyproject.toml", allow_single_file = True),
        "python_headers": attr.string(doc = "Default: the interpreter's headers."),
        "xla_ffi": attr.string(mandatory = True),
    }),
    environ = INTERPRETER_ENVIRON,
    doc = "Aliases of entangle_jax's external inputs, and the project metadata.",
)
