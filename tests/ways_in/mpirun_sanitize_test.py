"""The sanitizer across ranks on real mpi4jax programs under ``mpirun -n
2`` (issue 70): each rank runs two mpi4jax allreduces of different sizes
in ``sanitize(watchdog=..., on_hang="exit", ranks=DIR)``, and the test
merges the ranks' records (``--sanitized-ranks``).

* ``same_order``, the control: both ranks finish; the merge agrees over
  the two calls, and no watchdog reports.
* ``extra``: rank 1 makes a third allreduce that rank 0 never makes, and
  blocks in it, as MPI does: its watchdog reports the call in flight (its
  file:line) and ends it with status 124, so mpirun ends instead of
  hanging, and the merge names call 2: rank 0 made none, rank 1's in
  flight.
* ``swapped``: rank 1 makes the two in the other order. Open MPI aborts
  (``MPI_ERR_TRUNCATE``) inside the first call, before any call returns or
  the watchdog's limit passes: the merge says that the ranks' blocks never
  ended, and answers nothing (status 2), rather than that they agree.

Needs Open MPI's ``mpirun``, mpi4py and mpi4jax in this interpreter;
skipped without them unless ``ENTANGLE_JAX_REQUIRE_MPI=1``, as
tests/ways_in/mpirun_test.py. Outside Bazel, for the same reason.
"""

import io
import json
import pathlib
import tempfile
import textwrap
import unittest

from absl.testing import absltest

from entangle_jax.testing._sanitize import watchdog
from entangle_jax.testing._ways_in import command
from tests.ways_in import mpirun_test

WORKER = textwrap.dedent(
  """
  import importlib, sys
  import jax, jax.numpy as jnp
  from entangle_jax import testing

  FOLDER, SHAPE = sys.argv[1], sys.argv[2]
  with testing.sanitize():  # mpi4jax registers its targets on import.
    mpi4jax = importlib.import_module("mpi4jax")
  MPI = importlib.import_module("mpi4py.MPI")
  rank = MPI.COMM_WORLD.Get_rank()

  def f(x):
    y = jnp.tile(x, 2)
    if SHAPE == "swapped" and rank == 1:
      b = mpi4jax.allreduce(y, op=MPI.SUM)
      a = mpi4jax.allreduce(x, op=MPI.SUM)
    else:
      a = mpi4jax.allreduce(x, op=MPI.SUM)
      b = mpi4jax.allreduce(y, op=MPI.SUM)
    if SHAPE == "extra" and rank == 1:
      b = mpi4jax.allreduce(b, op=MPI.SUM)  # EXTRA
    return a, b

  with testing.sanitize(watchdog=3, on_hang="exit", ranks=FOLDER):
    jax.block_until_ready(jax.jit(f)(jnp.arange(4.0) + rank))
  print("rank", rank, "finished", flush=True)
  """
)


class MpirunSanitizeTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    reason = mpirun_test.missing()
    if reason is not None:
      if mpirun_test.REQUIRE_MPI:
        raise AssertionError(f"ENTANGLE_JAX_REQUIRE_MPI=1, but {reason}")
      raise unittest.SkipTest(reason)

  def run_shape(self, shape: str) -> tuple[int, str, dict, str]:
    """mpirun's status and output, and the merge (JSON and text)."""
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    script = pathlib.Path(folder.name, "worker.py")
    script.write_text(WORKER)
    ranks = str(pathlib.Path(folder.name, "ranks"))
    status, output = mpirun_test.mpirun(str(script), ranks, shape)
    merged = []
    for fmt in ("json", "text"):
      out = io.StringIO()
      command.main(
        ["--sanitized-ranks", ranks, "--format", fmt],
        out=out,
        err=io.StringIO(),
      )
      merged.append(out.getvalue())
    return status, output, json.loads(merged[0]), merged[1]

  def test_same_order_agrees_without_a_report(self):
    status, output, merged, text = self.run_shape("same_order")
    self.assertEqual(status, 0, output)
    self.assertEqual(merged["status"], 0, text)
    self.assertTrue(merged["agree"], text)
    self.assertEqual([len(r["calls"]) for r in merged["records"]], [2, 2])
    self.assertNotIn("sanitizer watchdog", output)

  def test_a_call_only_rank_1_makes_hangs_and_is_named(self):
    status, output, merged, text = self.run_shape("extra")
    self.assertNotEqual(status, 0, output)
    self.assertIn(f"Exit code:    {watchdog.HANG_EXIT_STATUS}", output)
    line = WORKER.splitlines().index(
      next(x for x in WORKER.splitlines() if "# EXTRA" in x)
    )
    self.assertRegex(
      output,
      r"sanitizer watchdog \(rank 1 of 2.*\n.*mpi_allreduce_ffi at "
      rf".*worker.py:{line + 1} ",
    )
    self.assertEqual(merged["status"], 1, text)
    divergence = merged["divergence"]
    self.assertEqual(divergence["index"], 2, text)
    first, other = (c["call"] for c in divergence["calls"])
    self.assertIsNone(first, text)  # Rank 0 made no third call.
    self.assertTrue(other["in_flight"], text)
    self.assertEqual(merged["hung"], [1], text)
    self.assertIn("rank 0: made no call 2", text)

  def test_an_abort_in_a_swap_is_no_agreement(self):
    status, output, merged, text = self.run_shape("swapped")
    self.assertNotEqual(status, 0, output)
    self.assertIn("MPI_ERR_TRUNCATE", output)
    self.assertEqual(merged["status"], 2, text)
    self.assertFalse(merged["agree"], text)
    self.assertNotEmpty(merged["unfinished"], text)
    self.assertIn("never ended", text)


if __name__ == "__main__":
  absltest.main()
