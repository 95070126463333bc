"""pytest imports this before any test module: JAX gets its CPU devices
before anything starts a backend.

Under Bazel, where no conftest runs, each py_test's environment sets
``JAX_NUM_CPU_DEVICES`` to the same count (tests/BUILD.bazel);
tests/repository/imports_test.py checks that both took effect.
"""

import jax
import pytest

from entangle_jax._src.targets import in_code
from tests import test_util

jax.config.update("jax_num_cpu_devices", test_util.NUM_CPU_DEVICES)


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
