"""``pytest --entangle-sanitize`` on three tests that mix native calls and
a host callback (issue 68): a chain ordered by data, a jitted helper
called twice (its callback's one Python callable called from two places),
and a read that nothing orders after the callback that clears the store.
The first two pass, the racy one fails, and the control, the same suite
without the sanitizer, shows that the racy test's reads really were wrong
(each test writes what it read to a file). It runs pytest on a small
suite: outside Bazel, as tests/ways_in/pytest_plugin_test.py."""

import json
import os
import tempfile
import textwrap

from absl.testing import absltest

from tests import test_util

SUITE = textwrap.dedent(
  """
  import json, os
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.experimental import io_callback
  from entangle_jax import entangle
  from entangle_jax.testing import example_store as store

  SLOT = jax.ShapeDtypeStruct((), jnp.int32)

  clear = store.clear_in_callback  # Every slot back to 0.0.

  def slow_zero(big):
    return (jnp.sum(jnp.sin(big)) * 0.0).astype(jnp.int32)

  @jax.jit
  def helper(t):
    return io_callback(clear, SLOT, t)

  def run(name, f):
    g = jax.jit(f)
    big = jnp.ones(1 << 20, jnp.float32)
    reads = [float(g(jnp.int32(3), big)) for _ in range(4)]
    with open(os.environ["READS"] + "." + name, "w") as out:
      json.dump(reads, out)

  def test_chain():
    def f(s, big):
      t = store.write_slot(s, 1.0)
      return store.read_slot(io_callback(clear, SLOT, t + slow_zero(big)))
    run("chain", f)

  def test_helper_twice():
    def f(s, big):
      t = store.write_slot(s, 1.0)
      c = helper(t + slow_zero(big))
      x = store.read_slot(c)
      t = store.write_slot(entangle(c, x), 2.0)
      return x + store.read_slot(helper(t))
    run("helper_twice", f)

  def test_racy():
    def f(s, big):
      t = store.write_slot(s, 1.0)
      io_callback(clear, SLOT, t + slow_zero(big))
      return store.read_slot(t)  # Not ordered after the clear.
    run("racy", f)
  """
)


class PluginOutcomesTest(absltest.TestCase):
  def run_suite(self, *args):
    """pytest on the suite; (its run, what each test read)."""
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    with open(f"{folder.name}/test_mixed.py", "w") as f:
      f.write(SUITE)
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    reads = f"{tmp.name}/reads"
    run = test_util.pytest_run(
      folder.name, *args, "-rA", TMPDIR=tmp.name, READS=reads
    )
    read = {}
    for name in ("chain", "helper_twice", "racy"):
      if os.path.exists(f"{reads}.{name}"):
        with open(f"{reads}.{name}") as f:
          read[name] = json.load(f)
    return run, read

  def test_pass_pass_fail(self):
    run, read = self.run_suite("--entangle-sanitize")
    self.assertIn(
      "PASSED test_mixed.py::test_chain", run.stdout, run.stdout[-3000:]
    )
    self.assertIn("PASSED test_mixed.py::test_helper_twice", run.stdout)
    self.assertIn("FAILED test_mixed.py::test_racy", run.stdout)
    self.assertIn("race (out of order)", run.stdout)
    self.assertIn("1 failed, 2 passed", run.stdout)
    # What the tests read under the sanitizer: the chains right, the
    # racy test's read ahead of the clear.
    self.assertEqual(set(read["chain"]), {0.0})
    self.assertEqual(set(read["helper_twice"]), {0.0})
    self.assertIn(1.0, read["racy"])

  def test_the_control_without_the_sanitizer(self):
    # Alone, all three pass: the racy test does not see its wrong reads,
    # which its file shows (the value the clear should have removed).
    run, read = self.run_suite()
    self.assertEqual(run.returncode, 0, run.stdout[-3000:])
    self.assertIn("3 passed", run.stdout)
    self.assertEqual(set(read["chain"]), {0.0})
    self.assertEqual(set(read["helper_twice"]), {0.0})
    self.assertIn(1.0, read["racy"])


if __name__ == "__main__":
  absltest.main()
