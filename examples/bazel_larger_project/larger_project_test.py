"""A project with its own jax uses entangle_jax: one jax, and real ordering."""

import functools
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import entangle, testing

# The example resource's custom-call targets (defined in
# entangle_jax/testing/_example_resource.py).
READ = "entangle_jax_read_slot"
WRITE = "entangle_jax_write_slot"


def absolute(path: str) -> pathlib.Path:
  # Not resolved: runfiles are links, and where they sit is the point.
  return pathlib.Path(os.path.abspath(path))


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
