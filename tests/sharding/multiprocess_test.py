"""Two processes x 4 CPU devices under jax.distributed, on localhost."""

import os
import socket
import subprocess
import sys

from absl.testing import absltest

from tests import test_util

WORKER = os.path.join(
  os.path.dirname(os.path.abspath(__file__)), "multiprocess_worker.py"
)
TIMEOUT_S = 240


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class MultiprocessTest(absltest.TestCase):
  def test_two_processes(self):
    port = str(free_port())
    env = test_util.child_env()
    env.pop("XLA_FLAGS", None)
    workers = [
      subprocess.Popen(
        [sys.executable, WORKER, str(i), port],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
      )
      for i in range(2)
    ]
    outputs = []
    try:
      for worker in workers:
        outputs.append(worker.communicate(timeout=TIMEOUT_S)[0])
    finally:
      for worker in workers:
        if worker.poll() is None:
          worker.kill()
          worker.wait()
    for i, (worker, output) in enumerate(zip(workers, outputs, strict=True)):
      self.assertEqual(worker.returncode, 0, f"process {i}:\n{output}")
      self.assertIn(f"process {i}: ordered and correct on 4 devices", output)


if __name__ == "__main__":
  absltest.main()
