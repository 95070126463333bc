"""The external repositories entangle_jax's BUILD files need.

Call `entangle_jax_repositories(...)` from a WORKSPACE (this one, or a
downstream project's, after a `local_repository`/`http_archive` named
"entangle_jax"). A project that has its own Python packages, headers or XLA
passes their labels; entangle_jax then fetches nothing for them:

  jax             a py_library that provides jax and jaxlib
  python_headers  a cc_library of the Python C headers
  pybind11        a cc_library of pybind11's headers
  xla_ffi         a cc_library of the XLA FFI headers, e.g.
                  "@xla//xla/ffi/api:ffi"

Each left out gets entangle_jax's self-contained default: the hashed
requirements.lock's run-time and test packages (DEFAULT_PACKAGES and what
they need) installed by the named interpreter's pip
(@entangle_jax_python, which also has a toolchain for that interpreter, to
register when the project has none), that interpreter's headers, and the
pinned, checksummed XLA FFI headers (@entangle_jax_xla_ffi).

The interpreter is named once, here: `python_interpreter` (an absolute path,
or a name looked up on PATH at the first fetch only) or
`python_interpreter_target` (a label of the interpreter file). It reads the
project metadata and, for the defaults, installs the lock; it should be the
interpreter the project's Python toolchain runs.
"""

load(":cuda.bzl", "cuda_toolkit")
load(":project_config.bzl", "project_config")
load(":python_env.bzl", "python_env")
load(":xla_ffi_headers.bzl", "xla_ffi_headers")

# What the default environment installs from the lock, with everything these
# need: the project's dependencies ([project] dependencies in pyproject.toml),
# its `test` group (the tools tests/ imports) and pybind11 (the `build` group's
# header library). Not the docs, lint or bench groups: a test's runfiles hold
# every installed file, and the whole lock tripled them.
# tests/repository/project_metadata_test.py checks this list against pyproject.toml.
DEFAULT_PACKAGES = ["jax", "absl-py", "hypothesis", "pytest", "flatbuffers", "pybind11"]

def _absolute(label):
    """`label` as seen from the main workspace, wherever it is written."""
    if label.startswith("//") or label.startswith(":"):
        return "@" + label if label.startswith("//") else "@//" + label
    return label

# buildifier: disable=unnamed-macro (a WORKSPACE setup function, like *_repositories)
def entangle_jax_repositories(
        jax = None,
        python_headers = None,
        pybind11 = None,
        xla_ffi = None,
        python_interpreter = "python3",
        python_interpreter_target = None,
        extra_packages = []):
    """Declares the repositories entangle_jax's BUILD files use.

    Args:
      jax: a py_library providing jax and jaxlib (default: the lock).
      python_headers: a cc_library of the Python C headers (default: the
        interpreter's include directory).
      pybind11: a cc_library of pybind11's headers (default: from the lock).
      xla_ffi: a cc_library of xla/ffi/api/*.h (default: the pinned jaxlib's,
        checksummed).
      python_interpreter: an absolute path, or a name looked up on PATH at
        the first fetch only.
      python_interpreter_target: the interpreter as a file label; wins over
        python_interpreter.
      extra_packages: more of the lock's packages (with what they need) for
        the default environment, beside DEFAULT_PACKAGES; unused when `jax`
        is given. entangle_jax's own WORKSPACE names its `real-libraries`
        group, whose tests skip without them.
    """
    interpreter = dict(
        python_interpreter = python_interpreter,
        python_interpreter_target = python_interpreter_target,
    )
    if not jax:
        python_env(
            name = "entangle_jax_python",
            packages = DEFAULT_PACKAGES + [p for p in extra_packages if p not in DEFAULT_PACKAGES],
            requirements = "@entangle_jax//:requirements.lock",
            **interpreter
        )
        jax = "@entangle_jax_python//:site"
    if not pybind11:
        if jax == "@entangle_jax_python//:site":
            pybind11 = "@entangle_jax_python//:pybind11"
        else:
            python_env(
                name = "entangle_jax_pybind11",
                packages = ["pybind11"],
                requirements = "@entangle_jax//:requirements.lock",
                **interpreter
            )
            pybind11 = "@entangle_jax_pybind11//:pybind11"
    if not xla_ffi:
        xla_ffi_headers(
            name = "entangle_jax_xla_ffi",
            pin = "@entangle_jax//tools:xla_ffi_pin.json",
            tool = "@entangle_jax//tools:xla_ffi_headers.py",
            **interpreter
        )
        xla_ffi = "@entangle_jax_xla_ffi//:xla_ffi"
    project_config(
        name = "entangle_jax_config",
        jax = _absolute(jax),
        pybind11 = _absolute(pybind11),
        pyproject = "@entangle_jax//:pyproject.toml",
        python_headers = _absolute(python_headers) if python_headers else None,
        xla_ffi = _absolute(xla_ffi),
        **interpreter
    )
    cuda_toolkit(name = "entangle_jax_cuda")
