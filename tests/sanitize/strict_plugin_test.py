"""``pytest --entangle-sanitize`` and ``--entangle-sanitize=strict`` on a
test that calls a target the sanitizer did not observe (imported in a
conftest.py, before it started), beside the control that imports it in the
test module. It runs pytest on small suites: outside Bazel, as
tests/ways_in/pytest_plugin_test.py."""

import importlib.util
import tempfile
import textwrap

from absl.testing import absltest

from tests import test_util

SUITE = textwrap.dedent(
  """
  import jax
  from entangle_jax.testing import example_store as store

  def test_write():
    jax.block_until_ready(jax.jit(lambda s: store.write_slot(s, 1.0))(3))
  """
)


class StrictPluginTest(absltest.TestCase):
  def run_suite(self, conftest: str, *args, more: int = 0):
    """pytest on the suite, and `more` copies of it (test_store_K.py)."""
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    with open(f"{folder.name}/test_store.py", "w") as f:
      f.write(SUITE)
    for k in range(more):
      with open(f"{folder.name}/test_store_{k}.py", "w") as f:
        f.write(SUITE)
    with open(f"{folder.name}/conftest.py", "w") as f:
      f.write(conftest)
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    return test_util.pytest_run(folder.name, *args, TMPDIR=tmp.name)

  def test_a_target_imported_in_a_conftest_is_reported_and_fails_strict(self):
    early = "from entangle_jax.testing import example_store  # noqa\n"
    run = self.run_suite(early, "--entangle-sanitize", "-rA")
    self.assertEqual(run.returncode, 0, run.stdout[-3000:])
    self.assertIn("entangle-jax sanitizer: not observed", run.stdout)
    self.assertIn("test_store.py::test_write", run.stdout)
    strict = self.run_suite(early, "--entangle-sanitize=strict", "-rA")
    self.assertEqual(strict.returncode, 1, strict.stdout[-3000:])
    self.assertIn("FAILED test_store.py::test_write", strict.stdout)
    # The control: imported by the test module, it is observed.
    late = self.run_suite("", "--entangle-sanitize=strict", "-rA")
    self.assertEqual(late.returncode, 0, late.stdout[-3000:])
    self.assertNotIn("not observed", late.stdout)

  @absltest.skipIf(
    importlib.util.find_spec("xdist") is None, "pytest-xdist is not installed"
  )
  def test_under_xdist_the_workers_tests_reach_the_summary(self):
    early = "from entangle_jax.testing import example_store  # noqa\n"
    args = ("-n", "2", "-rA")
    run = self.run_suite(early, "--entangle-sanitize", *args, more=3)
    self.assertEqual(run.returncode, 0, run.stdout[-3000:])
    self.assertIn("entangle-jax sanitizer: not observed", run.stdout)
    for name in ("test_store", *(f"test_store_{k}" for k in range(3))):
      self.assertIn(f"{name}.py::test_write: called targets", run.stdout)
    strict = self.run_suite(early, "--entangle-sanitize=strict", *args)
    self.assertEqual(strict.returncode, 1, strict.stdout[-3000:])
    self.assertIn("FAILED test_store.py::test_write", strict.stdout)
    self.assertIn("entangle-jax sanitizer: not observed", strict.stdout)
    self.assertIn("test_store.py::test_write: called targets", strict.stdout)
    # The control: imported by the test modules, every target is observed.
    late = self.run_suite("", "--entangle-sanitize=strict", *args, more=3)
    self.assertEqual(late.returncode, 0, late.stdout[-3000:])
    self.assertNotIn("not observed", late.stdout)


if __name__ == "__main__":
  absltest.main()
