"""pytest imports this before any test module: JAX gets its CPU devices
before anything starts a backend.

Under Bazel, where no conftest runs, each py_test's environment sets
``JAX_NUM_CPU_DEVICES`` to the same count (tests/BUILD.bazel);
tests/repository/imports_test.py checks that both took effect.
"""

import jax

from tests import test_util

jax.config.update("jax_num_cpu_devices", test_util.NUM_CPU_DEVICES)
