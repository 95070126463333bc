"""pytest imports this before any test module: JAX gets its CPU devices
before anything starts a backend.

Under Bazel, where no conftest runs, each py_test's environment sets
``JAX_NUM_CPU_DEVICES`` to the same count (tests/BUILD.bazel);
tests/repository/imports_test.py checks that both took effect.
"""

import jax
import pytest

from entangle_jax._src.targets import declarations as _declarations
from tests import test_util

jax.config.update("jax_num_cpu_devices", test_util.NUM_CPU_DEVICES)


@pytest.fixture(autouse=True)
def _no_declarations_left_behind():
  """A test that declares targets in code must take them back: a
  declaration left behind changes what later tests (and the docs pages
  they run) report."""
  before = dict(_declarations._in_code)
  yield
  left = {k: v for k, v in _declarations._in_code.items() if before.get(k) != v}
  assert not left and before.keys() <= _declarations._in_code.keys(), (
    f"the test changed the code declarations of {sorted(left)}"
  )
