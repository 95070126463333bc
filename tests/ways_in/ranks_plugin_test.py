"""``pytest --entangle-races=fail --entangle-ranks=DIR`` under ``mpirun -n
2`` (issue 70): each rank dumps its modules to DIR/rankR, and rank 0 checks
them across ranks once both are done. The suite's test makes two
allreduces (a target declared ``communicates``, on entangle's no-op
handler: nothing is sent, so a mismatch cannot hang) ordered by data on
each rank; with ``SWAP=1`` rank 1 makes them in the other order. The
control is the same suite without the swap, which passes; the swapped one
passes on each rank's own check and fails on rank 0 across ranks.

Needs ``mpirun`` (Debian's openmpi-bin); skipped without it unless
``ENTANGLE_JAX_REQUIRE_MPI=1``. Not mpi4jax: no message is sent. Outside
Bazel, as tests/ways_in/pytest_plugin_test.py.
"""

import pathlib
import shutil
import subprocess
import tempfile
import textwrap

from absl.testing import absltest

from entangle_jax.testing._ways_in import launcher_ranks
from tests import test_util

TIMEOUT_S = 240

SUITE = textwrap.dedent(
  """
  import functools, os
  import jax, jax.numpy as jnp
  from entangle_jax import declare_target, entangle
  from entangle_jax._src import native

  RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])
  SWAP = os.environ.get("SWAP") == "1"

  @functools.cache
  def registered():
    handler = native.load().registrations()["entangle"]
    jax.ffi.register_ffi_target("ranks_allreduce", handler, platform="cpu")
    declare_target(
      "ranks_allreduce",
      mode="write",
      communicates={"kind": "collective", "same_result": True},
    )

  def allreduce(x):
    registered()
    call = jax.ffi.ffi_call(
      "ranks_allreduce", jax.ShapeDtypeStruct(x.shape, x.dtype),
      has_side_effect=True,
    )
    return call(x)

  def test_two_allreduces():
    def f(x, y):
      first, second = (y, x) if SWAP and RANK == 1 else (x, y)
      a = allreduce(first)
      return a, allreduce(entangle(second, a))
    jax.block_until_ready(jax.jit(f)(jnp.ones(4), jnp.ones(8)))
  """
)


class _RanksRun(absltest.TestCase):
  """Runs the plugin under ``mpirun -n 2`` on `suite`, written to a
  temporary folder."""

  suite = SUITE

  def setUp(self):
    super().setUp()
    test_util.needs_mpirun(self)
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    self.folder = pathlib.Path(folder.name)
    (self.folder / "test_ranks.py").write_text(self.suite)

  def run_ranks(self, swap: bool) -> tuple[int, str]:
    return test_util.mpirun_pytest(
      self.folder,
      "--entangle-races=fail",
      f"--entangle-ranks={self.folder / 'ranks'}",
      swap=swap,
      timeout=TIMEOUT_S,
    )


class RanksPluginTest(_RanksRun):
  def test_ranks_in_one_order_pass(self):
    status, output = self.run_ranks(swap=False)
    self.assertEqual(status, 0, output)
    self.assertIn("across 2 ranks (--entangle-ranks)", output)
    self.assertIn("Proved: the 2 ranks make 2 communicating calls", output)
    self.assertIn("rank 1: its modules are in", output)

  def test_a_rank_that_swaps_them_fails_the_run_on_rank_0(self):
    status, output = self.run_ranks(swap=True)
    self.assertNotEqual(status, 0, output)
    # Each rank's own check passes: its two calls are ordered.
    self.assertNotIn("with races", output.replace("0 with races", ""))
    self.assertIn("Mismatch at call 1", output)
    self.assertIn("The ranks are not proved to agree: the run fails", output)


# Issue 77, defect 4: two jitted functions, each one allreduce (of
# different sizes), compiled f then g on every rank, and called f then g;
# with SWAP=1 rank 1 calls g first. The dumps are the same on both ranks
# (the same modules, compiled in the same order): only the order of the
# jitted calls differs, which the plugin's execution record gives.
SEQUENCE = SUITE.split("def test_two_allreduces():")[0] + textwrap.dedent(
  """
  def test_two_jitted_calls():
    x = jnp.ones(4)
    f = jax.jit(lambda x: allreduce(x)).lower(x).compile()
    g = jax.jit(lambda x: allreduce(jnp.tile(x, 2))).lower(x).compile()
    calls = [g, f] if SWAP and RANK == 1 else [f, g]
    for call in calls:
      jax.block_until_ready(call(x))
  """
)


class RanksSequenceTest(_RanksRun):
  """Each rank's jitted calls, in the order they ran, checked as one
  sequence (the plugin records it)."""

  suite = SEQUENCE

  def test_g_before_f_on_rank_1_fails_the_run(self):
    # Before the execution record, this run passed: two modules a rank
    # were NOT PROVED (exit 2), which fails no run.
    status, output = self.run_ranks(swap=True)
    self.assertNotEqual(status, 0, output)
    self.assertIn("Mismatch at call 1", output)
    self.assertIn("execution 1)", output)
    self.assertIn("The ranks are not proved to agree: the run fails", output)

  def test_control_the_same_order_is_proved(self):
    status, output = self.run_ranks(swap=False)
    self.assertEqual(status, 0, output)
    self.assertIn("Proved: the 2 ranks make 2 communicating calls", output)
    self.assertNotIn("NOT PROVED", output)


class RanksUsageTest(absltest.TestCase):
  def run_pytest(self, *args: str) -> subprocess.CompletedProcess:
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    path = pathlib.Path(folder.name)
    (path / "test_nothing.py").write_text("def test_nothing():\n  pass\n")
    return test_util.pytest_run(path, *args)

  def test_no_launcher_is_a_usage_error(self):
    run = self.run_pytest("--entangle-races=fail", "--entangle-ranks=out")
    self.assertEqual(run.returncode, 4, run.stdout + run.stderr)
    self.assertIn("OMPI_COMM_WORLD_RANK", run.stderr)

  def test_without_the_race_check_is_a_usage_error(self):
    run = self.run_pytest("--entangle-ranks=out")
    self.assertEqual(run.returncode, 4, run.stdout + run.stderr)
    self.assertIn("give --entangle-races", run.stderr)


class LauncherRanksTest(absltest.TestCase):
  def test_each_launcher_names_the_rank(self):
    for environ, want in (
      ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, (1, 2)),
      ({"PMI_RANK": "0", "PMI_SIZE": "3"}, (0, 3)),
      ({"SLURM_PROCID": "2", "SLURM_NTASKS": "4"}, (2, 4)),
    ):
      ranks = launcher_ranks.from_environment("d", environ)
      assert ranks is not None
      self.assertEqual((ranks.rank, ranks.size), want)
    # Controls: one process, or no launcher, is no launch of ranks.
    one = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}
    self.assertIsNone(launcher_ranks.from_environment("d", one))
    self.assertIsNone(launcher_ranks.from_environment("d", {}))

  def test_bad_values_name_the_variable(self):
    for environ in (
      {"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"},
      {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2"},
    ):
      with self.assertRaisesRegex(ValueError, "OMPI_COMM_WORLD_RANK"):
        launcher_ranks.from_environment("d", environ)

  def test_a_former_launchs_marker_is_not_taken(self):
    folder = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, folder)
    now = launcher_ranks.Ranks(0, 2, folder, "launch-2")
    before = launcher_ranks.Ranks(1, 2, folder, "launch-1")
    now.start()
    before.finished()  # Left by an earlier launch's rank 1.
    now.finished()
    self.assertEqual(now.wait(0.3, poll_s=0.05), [1])
    launcher_ranks.Ranks(1, 2, folder, "launch-2").finished()
    self.assertEqual(now.wait(0.3, poll_s=0.05), [])


if __name__ == "__main__":
  absltest.main()
