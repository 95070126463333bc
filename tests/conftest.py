"""pytest imports this before any test module: JAX gets its CPU devices
before anything starts a backend.

Under Bazel, where no conftest runs, each py_test's environment sets
``JAX_NUM_CPU_DEVICES`` to the same count (tests/BUILD.bazel);
tests/repository/imports_test.py checks that both took effect.
"""

import os
import shutil
import tempfile

import jax
import pytest

from entangle_jax._src.targets import in_code
from tests import test_util

jax.config.update("jax_num_cpu_devices", test_util.NUM_CPU_DEVICES)


def pytest_configure(config):
  """Every temporary file of the run, the tests' own and their child
  processes', goes in one folder that the run removes as it ends (Bazel
  does the same with each test's TEST_TMPDIR): many tests make folders
  with `tempfile.mkdtemp` and leave them to be thrown away."""
  del config
  folder = tempfile.mkdtemp(prefix="entangle-jax-tests-")
  _RUN_TEMP.append((folder, os.environ.get("TMPDIR"), tempfile.tempdir))
  os.environ["TMPDIR"] = tempfile.tempdir = folder


def pytest_unconfigure(config):
  del config
  while _RUN_TEMP:
    folder, environ, tempdir = _RUN_TEMP.pop()
    if environ is None:
      os.environ.pop("TMPDIR", None)
    else:
      os.environ["TMPDIR"] = environ
    tempfile.tempdir = tempdir
    shutil.rmtree(folder, ignore_errors=True)


_RUN_TEMP: list[tuple[str, str | None, str | None]] = []
"""The run's temporary folder, and TMPDIR and `tempfile.tempdir` as they
were before it."""


@pytest.fixture(autouse=True)
def _no_declarations_left_behind():
  """A test that declares targets in code must take them back: a
  declaration left behind changes what later tests (and the docs pages
  they run) report."""
  before = dict(in_code.DECLARED)
  yield
  left = {k: v for k, v in in_code.DECLARED.items() if before.get(k) != v}
  assert not left and before.keys() <= in_code.DECLARED.keys(), (
    f"the test changed the code declarations of {sorted(left)}"
  )
