"""Builds the ``tp`` binding into a directory, as its own project would:
a plain C++ compiler and the FFI headers of the installed jaxlib."""

import pathlib
import shutil
import subprocess

import jax

HERE = pathlib.Path(__file__).parent


def build(root: pathlib.Path) -> pathlib.Path:
  """Puts the importable package ``tp`` (with its native library) under
  `root`; returns the package's directory."""
  package = root / "tp"
  shutil.copytree(HERE / "tp", package)
  subprocess.run(
    [
      shutil.which("c++") or "c++",
      "-std=c++17",
      "-O1",
      "-shared",
      "-fPIC",
      "-isystem",
      jax.ffi.include_dir(),
      str(HERE / "counters.cc"),
      "-o",
      str(package / "libcounters.so"),
    ],
    check=True,
    capture_output=True,
    text=True,
  )
  return package
