"""Which Python line made a call: the user's, not the binding's.

A native call's stack (innermost frame first) runs through the binding
that wrapped ``jax.ffi.ffi_call``, JAX itself, and for a test the test
runner. The user's line is the innermost frame outside all of these:

* library code: this package's own (``entangle_jax/_src``,
  ``entangle_jax/testing``: ``Resource``, ``entangle``, the example
  store), JAX's and jaxlib's, the test runners' (pytest, pluggy, unittest,
  absl), the interpreter's and its environment's (the standard library,
  installed packages, the scripts that start a runner), and whatever
  `mark_library` was given;
* the binding: an installed package other than those above whose line
  called ``jax.ffi.ffi_call`` (the innermost frame), or, when that line is
  not library code, the package it lies in (its
  top-level directory with an ``__init__.py``), when a frame further out
  lies outside it. A call made in a script or in the caller's own package
  is its own line, and so is one of this package's demo programs.

`lines` gives both: the user's line, and the binding's when it differs.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sysconfig

# entangle_jax/, three levels up from entangle_jax/testing/_analysis/.
_PACKAGE_DIR = os.path.dirname(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)

_marked: set[str] = set()


def _package_dirs(*names: str) -> list[str]:
  found = []
  for name in names:
    spec = _find(name)
    if spec is not None and spec.submodule_search_locations:
      found += [os.path.abspath(p) for p in spec.submodule_search_locations]
  return found


@functools.cache
def _runtime_dirs() -> tuple[str, ...]:
  """This package's, JAX's and the test runners' directories: library code
  that is never a binding."""
  dirs = [os.path.join(_PACKAGE_DIR, name) for name in ("_src", "testing")]
  dirs += _package_dirs(
    "jax", "jaxlib", "_pytest", "pluggy", "pytest", "unittest", "absl"
  )
  return tuple(os.path.join(d, "") for d in dirs)


@functools.lru_cache(maxsize=4096)
def _installed_binding(path: str) -> bool:
  """Whether `path` lies in an installed package other than this one, JAX
  and the test runners: a third-party binding such as klujax."""
  absolute = os.path.abspath(path)
  return bool(_INSTALLED.intersection(absolute.split(os.sep))) and not (
    absolute.startswith(_runtime_dirs())
  )


@functools.cache
def _library_dirs() -> tuple[str, ...]:
  """Directories of library code, each ending in a separator."""
  dirs = [os.path.join(_PACKAGE_DIR, name) for name in ("_src", "testing")]
  dirs += _package_dirs(
    "jax", "jaxlib", "_pytest", "pluggy", "pytest", "unittest", "absl"
  )
  # The interpreter's and the environment's own files: the standard
  # library, installed packages (bindings among them), and the scripts
  # that start a test runner (.venv/bin/pytest).
  paths = sysconfig.get_paths()
  keys = ("stdlib", "platstdlib", "purelib", "platlib", "scripts")
  dirs += [paths[k] for k in keys if k in paths]
  # Not all of sys.prefix: a project may live below it (/usr/src/app with
  # the system's Python).
  return tuple(
    os.path.join(os.path.abspath(d), "") for d in dict.fromkeys(dirs)
  )


def mark_library(*packages: str) -> None:
  """Counts the frames of `packages` as library code in race reports,
  ``assert_happens_before`` errors and ``order_graph`` labels, so they
  name the line that called into them.

  Each of `packages` is an importable package or module name
  (``"mylib"``, ``"mylib.ffi"``) or a directory. For a binding whose
  users' code lives in the same top-level package as the binding, where
  the binding's own frames cannot be told apart otherwise.

  Raises:
    TypeError: one of `packages` is not a str.
    ValueError: one is neither importable nor a directory.
  """
  for package in packages:
    if not isinstance(package, str):
      raise TypeError(
        f"mark_library: expected package names or directories, got "
        f"{type(package).__name__}"
      )
    if os.path.isdir(package):
      _marked.add(os.path.join(os.path.abspath(package), ""))
      continue
    dirs = _package_dirs(package)
    if not dirs:
      spec = _find(package)
      if spec is None or not spec.origin:
        raise ValueError(
          f"mark_library: {package!r} is neither an importable package or "
          "module nor a directory"
        )
      _marked.add(os.path.abspath(spec.origin))
      continue
    _marked.update(os.path.join(d, "") for d in dirs)
  _is_library.cache_clear()


def _find(name: str):
  try:
    return importlib.util.find_spec(name)
  except (ImportError, ValueError):
    return None


# Installed packages of any environment: a dump is often checked by
# another environment than the one whose program wrote it.
_INSTALLED = frozenset({"site-packages", "dist-packages"})


def is_library(path: str) -> bool:
  """Whether `path` is library code (JAX's, entangle-jax's, an installed
  binding's, a package marked with `mark_library`), not the user's."""
  return _is_library(path)


@functools.lru_cache(maxsize=4096)
def _is_library(path: str) -> bool:
  absolute = os.path.abspath(path)
  if absolute in _marked:
    return True
  if _INSTALLED.intersection(absolute.split(os.sep)):
    return True
  return absolute.startswith(_library_dirs()) or absolute.startswith(
    tuple(m for m in _marked if m.endswith(os.sep))
  )


@functools.lru_cache(maxsize=4096)
def _package_root(path: str) -> str | None:
  """The top-level package directory `path` lies in, or None for a file
  outside any package."""
  directory = os.path.dirname(os.path.abspath(path))
  root = None
  while os.path.isfile(os.path.join(directory, "__init__.py")):
    root = directory
    parent = os.path.dirname(directory)
    if parent == directory:
      break
    directory = parent
  return None if root is None else os.path.join(root, "")


Frame = tuple[str, int]


def lines(stack: tuple[Frame, ...]) -> tuple[Frame | None, Frame | None]:
  """The user's frame of `stack` (innermost first), and the binding's
  innermost frame when it is another one; ``(None, None)`` for no stack."""
  if not stack:
    return None, None
  outside = [f for f in stack if not _is_library(f[0])]
  if not outside:
    return stack[0], None  # All library: name the innermost.
  binding = outside[0]
  if binding is not stack[0]:
    if _installed_binding(stack[0][0]):
      # An installed binding (klujax) made the call for this line.
      return binding, stack[0]
    return binding, None  # It called library code, which made the call.
  if os.path.abspath(binding[0]).startswith(os.path.join(_PACKAGE_DIR, "")):
    return binding, None  # This package's demo programs are user code.
  root = _package_root(binding[0])
  if root is not None:
    for frame in outside[1:]:
      if not os.path.abspath(frame[0]).startswith(root):
        return frame, binding
  return binding, None


def shown(frame: Frame, cwd: str | None = None) -> str:
  """``file:line``, the file relative to `cwd` (the working directory)
  when it lies below it and `cwd` is inside the file's project (a
  directory with ``pyproject.toml``, ``setup.py``, ``.git`` or a Bazel
  ``WORKSPACE``): run from above the project, a relative path would read
  like an absolute one cut short, so it is absolute."""
  file, line = frame
  return f"{shown_file(file, cwd)}:{line}"


def shown_file(file: str, cwd: str | None = None) -> str:
  """`file` as `shown` writes it (relative to `cwd` when that is shorter
  and unambiguous), without the line."""
  return _short_path(file, cwd or os.getcwd())


@functools.lru_cache(maxsize=1024)
def _short_path(path: str, cwd: str) -> str:
  absolute = os.path.join(cwd, path) if not os.path.isabs(path) else path
  absolute = os.path.normpath(absolute)
  if not absolute.startswith(cwd + os.sep):
    return path
  root = _project_root(os.path.dirname(absolute))
  if root is not None and not (cwd + os.sep).startswith(root + os.sep):
    return absolute  # The working directory lies above the project.
  return os.path.relpath(absolute, cwd)


_PROJECT_MARKERS = ("pyproject.toml", "setup.py", ".git", "WORKSPACE")


@functools.lru_cache(maxsize=1024)
def _project_root(directory: str) -> str | None:
  """The nearest directory from `directory` upward that holds a project
  marker, or None."""
  while True:
    if any(
      os.path.exists(os.path.join(directory, m)) for m in _PROJECT_MARKERS
    ):
      return directory
    parent = os.path.dirname(directory)
    if parent == directory:
      return None
    directory = parent
