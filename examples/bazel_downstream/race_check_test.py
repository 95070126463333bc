"""A downstream test run with the race check on: every module the run
compiles is checked when ``absltest.main()`` returns (see the last line).

The control runs the same kind of test file without the ordering, in a
fresh interpreter, and the check fails that run."""

import os
import subprocess
import sys
import tempfile
import textwrap

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import entangle
from entangle_jax.testing import race_check, read_slot, write_slot


def step(slot):
  token = write_slot(slot, 1.0)
  value = read_slot(token)
  write_slot(entangle(token, value), 2.0)  # after the read
  return value


UNORDERED_TEST = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  from absl.testing import absltest
  from entangle_jax.testing import race_check, read_slot, write_slot


  def step(slot):
    token = write_slot(slot, 1.0)
    value = read_slot(token)
    write_slot(token, 2.0)  # nothing orders it after the read
    return value


  class StepTest(absltest.TestCase):
    def test_step(self):
      jax.jit(step)(jnp.int32(0)).block_until_ready()


  if __name__ == "__main__":
    with race_check():
      absltest.main()
  """
)


class RaceCheckTest(absltest.TestCase):
  def test_an_ordered_step(self):
    self.assertEqual(float(jax.jit(step)(jnp.int32(0))), 1.0)

  def test_control_an_unordered_step_fails_its_run(self):
    with tempfile.TemporaryDirectory() as root:
      path = os.path.join(root, "unordered_test.py")
      with open(path, "w") as f:
        f.write(UNORDERED_TEST)
      # Its own dump: this run's XLA_FLAGS would put its modules in ours.
      env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
      env["PYTHONPATH"] = os.pathsep.join(sys.path)
      result = subprocess.run(
        [sys.executable, path],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
      )
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertIn("1 with races, 1 pair.", result.stderr)


if __name__ == "__main__":
  with race_check():
    absltest.main()
