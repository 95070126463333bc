"""A project with its own Python, jax and XLA headers uses entangle_jax.

Checks that the project's pieces are the ones in use (its interpreter, its one
jax, which entangle_jax's locks do not pin, and its jaxlib's FFI headers in
entangle_jax's build), and that entangle orders a read before a write, with a
control that is not ordered without it.
"""

import functools
import os
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import jaxlib
from absl.testing import absltest

from entangle_jax import entangle, testing

# The example resource's custom-call targets (defined in
# entangle_jax/testing/example_store.py). The program below has one read
# and one write, so the bare targets select exactly those two ops.
READ = "entangle_jax_read_slot"
WRITE = "entangle_jax_write_slot"
# The version WORKSPACE asks project_python for.
PROJECT_PYTHON = (3, 12)
# Where the project's pip hub has its jaxlib's XLA FFI headers.
PROJECT_FFI_HEADERS = "@project_pip//:site/jaxlib/include/xla/ffi/api/"


def absolute(path: str) -> pathlib.Path:
  # Not resolved: runfiles are links, and where they sit is the point.
  return pathlib.Path(os.path.abspath(path))


def runfile(repository: str, path: str) -> pathlib.Path:
  return pathlib.Path(os.environ["TEST_SRCDIR"], repository, path)


def pins(lock: pathlib.Path, package: str) -> set[str]:
  """The versions a hashed lock pins for `package` (any marker)."""
  pattern = re.compile(rf"^{re.escape(package)}==([^\s;\\]+)", re.M)
  return set(pattern.findall(lock.read_text()))


def jax_packages_on_path() -> list[pathlib.Path]:
  """Every `jax` package directory that an import could find."""
  found = {
    absolute(os.path.join(entry or ".", "jax"))
    for entry in sys.path
    if os.path.isfile(os.path.join(entry or ".", "jax", "__init__.py"))
  }
  return sorted(found)


def read_then_write(token, busywork, *, ordered):
  # The read waits on unrelated work, so that without a data dependency XLA
  # is free to schedule the write first.
  delay = (jnp.sum(jnp.sin(busywork)) * 0).astype(jnp.int32)
  value = testing.read_slot(token + delay)
  if ordered:
    token = entangle(token, value)
  testing.write_slot(token, jnp.float32(2.0))
  return value


def compile_program(ordered):
  fn = jax.jit(functools.partial(read_then_write, ordered=ordered))
  return fn.lower(jnp.int32(0), jnp.ones(100_000)).compile()


class LargerProjectTest(absltest.TestCase):
  def test_the_projects_interpreter_runs_the_test(self):
    self.assertEqual(sys.version_info[:2], PROJECT_PYTHON, sys.executable)

  def test_exactly_one_jax_and_it_is_the_projects(self):
    packages = jax_packages_on_path()
    self.assertLen(packages, 1, packages)
    jax_file = absolute(jax.__file__)
    self.assertEqual(packages[0], jax_file.parent)
    # In the project's hub (@project_pip), not entangle_jax's own.
    runfiles = absolute(os.environ["TEST_SRCDIR"])
    self.assertEqual(
      jax_file.relative_to(runfiles).parts[:3], ("project_pip", "site", "jax")
    )
    self.assertNotIn("entangle_jax_python", os.listdir(runfiles))

  def test_jax_is_the_projects_pin_and_not_one_entangle_jax_pins(self):
    project = runfile("larger_project", "requirements.lock")
    entangle_jax_lock = runfile("entangle_jax", "requirements.lock")
    for package, module in (("jax", jax), ("jaxlib", jaxlib)):
      with self.subTest(package):
        self.assertEqual(pins(project, package), {module.__version__})
        own = pins(entangle_jax_lock, package)
        self.assertNotEmpty(own)
        self.assertNotIn(module.__version__, own)

  def test_entangle_jax_is_built_with_the_projects_ffi_headers(self):
    query = runfile("larger_project", "entangle_jax_ffi_headers")
    labels = query.read_text().split()
    self.assertIn("@project_pip//:xla_ffi", labels)
    headers = [label for label in labels if "xla/ffi/api/" in label]
    self.assertIn(PROJECT_FFI_HEADERS + "c_api.h", headers)
    for label in headers:
      self.assertTrue(label.startswith(PROJECT_FFI_HEADERS), label)
    # entangle_jax's own pinned headers were not used (nor fetched).
    self.assertEqual(
      [label for label in labels if label.startswith("@entangle_jax_xla_ffi")],
      [],
    )

  def test_entangle_orders_the_read_before_the_write(self):
    self.assertTrue(
      testing.happens_before(compile_program(ordered=True), READ, WRITE)
    )

  def test_control_without_entangle_the_read_is_not_ordered(self):
    compiled = compile_program(ordered=False)
    self.assertFalse(testing.happens_before(compiled, READ, WRITE))
    self.assertNotEmpty(testing.races(compiled, among=[READ, WRITE]))

  def test_values_entangle_reads_before_the_overwrite(self):
    fn = jax.jit(functools.partial(read_then_write, ordered=True))
    args = (jnp.int32(0), jnp.ones(100_000))
    for _ in range(20):
      testing.reset_slots()
      testing.write_slot(jnp.int32(0), jnp.float32(1.0))
      self.assertEqual(float(fn(*args)), 1.0)


if __name__ == "__main__":
  absltest.main()
