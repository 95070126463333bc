"""``pytest --entangle-races=fail --entangle-sanitize`` on a correct test
whose host callbacks are all in a loop: the execution counter the
sanitizer adds to its module is no call of the test's program, so the
race check passes it as it does without the sanitizer. It runs pytest on
a small suite: outside Bazel, as tests/ways_in/pytest_plugin_test.py."""

import tempfile
import textwrap

from absl.testing import absltest

from tests import test_util

SUITE = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax import lax
  from jax.experimental import io_callback

  log = []

  def put(x):
    log.append(float(x))
    return np.float32(x)

  def test_ordered_loop():
    shape = jax.ShapeDtypeStruct((), jnp.float32)
    def f(x):
      def body(i, x):
        a = io_callback(put, shape, x, ordered=True)
        return io_callback(put, shape, a + 1, ordered=True)
      return lax.fori_loop(0, 3, body, x)
    jax.block_until_ready(jax.jit(f)(jnp.float32(1.0)))
    # What ran, as the callbacks saw it: program order.
    assert log == [1.0, 2.0, 2.0, 3.0, 3.0, 4.0], log
  """
)


class RacesUnderSanitizeTest(absltest.TestCase):
  def run_suite(self, *args):
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    with open(f"{folder.name}/test_loop.py", "w") as f:
      f.write(SUITE)
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    return test_util.pytest_run(folder.name, *args, TMPDIR=tmp.name)

  def test_a_correct_test_passes_with_and_without_the_sanitizer(self):
    alone = self.run_suite("--entangle-races=fail", "-rA")
    self.assertEqual(alone.returncode, 0, alone.stdout[-3000:])
    # -rP: a passed test's sections, the sanitizer's report among them.
    both = self.run_suite("--entangle-races=fail", "--entangle-sanitize", "-rP")
    self.assertEqual(both.returncode, 0, both.stdout[-3000:])
    self.assertIn("1 passed", both.stdout)
    self.assertIn("0 with races, 0 pairs", both.stdout)
    # The control: the sanitizer did run the test, and compared its six
    # loop calls (each told its execution by the sanitizer's execution op).
    compared = "entangle_jax sanitizer: 6 calls, 0 races, 0 contradictions"
    self.assertIn(f"{compared}\n", both.stdout)


if __name__ == "__main__":
  absltest.main()
