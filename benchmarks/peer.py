"""The peer, entangle-jax 0.1.1, in a venv of its own under the cache dir.

Both packages import as ``entangle_jax``, so the peer cannot share this
checkout's venv. Its workers see, of this checkout, only the ``benchmarks``
package (`isolated_path`) and the example resource's compiled extension
(`native_extension`).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Generator

from benchmarks.cases import PEER_VERSION
from entangle_jax.testing import example_store

PACKAGE = pathlib.Path(__file__).resolve().parent


def cache_dir() -> pathlib.Path:
  default = pathlib.Path.home() / ".cache" / "entangle-jax"
  return pathlib.Path(os.environ.get("ENTANGLE_JAX_CACHE", default))


def python() -> pathlib.Path:
  """A venv holding the peer package, created on first use.

  One per Python version, made with this interpreter: the peer's extension
  loads into this checkout's workers and this checkout's example resource
  into the peer's, so both must be built for the same Python.
  """
  tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
  venv = cache_dir() / f"peer-{PEER_VERSION}-{tag}"
  interpreter = venv / "bin" / "python"
  if not interpreter.exists():
    subprocess.run(
      [
        "uv",
        "venv",
        "--quiet",
        "--allow-existing",
        "--python",
        sys.executable,
        str(venv),
      ],
      check=True,
    )
    subprocess.run(
      [
        "uv",
        "pip",
        "install",
        "--quiet",
        "--python",
        str(interpreter),
        f"entangle-jax=={PEER_VERSION}",
      ],
      check=True,
    )
  return interpreter


def extension(interpreter: pathlib.Path) -> str:
  """Path of the peer's compiled extension, which registers its handler."""
  venv = interpreter.parent.parent
  found = sorted(venv.glob("lib/python*/site-packages/entangle_jax/_ffi*.so"))
  if not found:
    raise FileNotFoundError(f"no entangle_jax/_ffi*.so under {venv}")
  return str(found[0])


def native_extension() -> str:
  """Path of this checkout's example-resource extension."""
  return str(example_store._native.__file__)


@contextlib.contextmanager
def isolated_path() -> Generator[str, None, None]:
  """A folder whose only entry is a link to this ``benchmarks`` package.

  On the peer worker's PYTHONPATH it makes ``benchmarks`` importable
  without putting this checkout's root, and its ``entangle_jax``, ahead of
  the peer's.
  """
  with tempfile.TemporaryDirectory(prefix="entangle-jax-bench-") as folder:
    (pathlib.Path(folder) / PACKAGE.name).symlink_to(PACKAGE)
    yield folder
