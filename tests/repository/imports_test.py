"""Test modules set JAX's devices up before anything starts its backends.

JAX fixes the number of CPU devices when a backend first starts. pytest
imports every test file before running any test, and Bazel runs each file
in a process of its own, so a test module that asks JAX for its devices at
import time leaves later modules with one device instead of
`test_util.NUM_CPU_DEVICES` (it happened: `pytest tests/primitive/gpu_test.py
tests/sharding/sharding_test.py`).
"""

import pathlib
import subprocess
import sys

import jax
from absl.testing import absltest

from tests import test_util

# Not resolved: under Bazel the runfiles tree links to the source tree, whose
# entangle_jax/ has no compiled extension.
TESTS = pathlib.Path(__file__).absolute().parent.parent
REPOSITORY = TESTS.parent

_IMPORT_ALL_WITHOUT_A_BACKEND = """
import importlib, sys, unittest
import jax
# Any backend started from here on fails: the module that started it is named.
jax.config.update("jax_platforms", "no_such_platform")
for name in sys.argv[1:]:
  try:
    importlib.import_module(name)
  except unittest.SkipTest:
    pass  # A module that skips itself where its files are missing.
  except Exception as error:
    sys.exit(f"importing {name} started a JAX backend: {error!r}"[:500])
"""


def sibling_test_files() -> list[pathlib.Path]:
  return sorted(TESTS.rglob("*_test.py"))


class ImportsTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.modules = [
      m for m in sibling_test_files() if m.name != "imports_test.py"
    ]
    if not self.modules:
      # Bazel gives each test only its own file.
      self.skipTest("the other test files are not next to this one")

  def test_no_test_module_starts_a_backend_at_import(self):
    names = [
      ".".join(module.relative_to(REPOSITORY).with_suffix("").parts)
      for module in self.modules
    ]
    result = subprocess.run(
      [sys.executable, "-c", _IMPORT_ALL_WITHOUT_A_BACKEND, *names],
      cwd=REPOSITORY,
      capture_output=True,
      text=True,
      check=False,
    )
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])

  def test_bazel_sets_up_the_devices_conftest_does(self):
    build = (TESTS / "BUILD.bazel").read_text()
    devices = f'{{"JAX_NUM_CPU_DEVICES": "{test_util.NUM_CPU_DEVICES}"}}'
    self.assertIn(f"_DEVICES = {devices}", build)
    # Every test target takes it: a file's own, and each folder's suite.
    self.assertEqual(build.count("py_test("), 2)
    # A file's own target: with its module's name where it has shards.
    self.assertIn(") if name_of(src) in _SHARDS else _DEVICES,", build)
    self.assertEqual(build.count("env = dict(\n            _DEVICES,"), 2)

  def test_the_device_count_took_effect(self):
    # Under pytest (conftest.py) and under Bazel (its test environment).
    self.assertEqual(jax.device_count(), test_util.NUM_CPU_DEVICES)


if __name__ == "__main__":
  absltest.main()
