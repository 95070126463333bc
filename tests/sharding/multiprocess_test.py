"""Two processes x 4 CPU devices under jax.distributed, on localhost."""

import os

from absl.testing import absltest

from tests import test_util

WORKER = os.path.join(
  os.path.dirname(os.path.abspath(__file__)), "multiprocess_worker.py"
)
TIMEOUT_S = 240


class MultiprocessTest(absltest.TestCase):
  def test_two_processes(self):
    runs = test_util.run_two_processes(WORKER, timeout=TIMEOUT_S)
    for i, (returncode, output) in enumerate(runs):
      self.assertEqual(returncode, 0, f"process {i}:\n{output}")
      self.assertIn(f"process {i}: ordered and correct on 4 devices", output)


if __name__ == "__main__":
  absltest.main()
