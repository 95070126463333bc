"""``pytest --entangle-sanitize --entangle-sanitize-ranks=DIR
--entangle-watchdog=SECONDS`` under ``mpirun -n 2`` (issue 70): each rank
records its communicating calls to DIR/rankR, and rank 0, once both are
done, names the first call at which they differ. The suite's test makes
two "allreduces" of different sizes, ordered by data on each rank (the
example store's write handler under a target declared ``communicates``:
nothing is sent, so a mismatch cannot hang). With ``SWAP=1`` rank 1 makes
them in the other order, and rank 0's first call sleeps past the
watchdog's limit: the run fails on rank 0, naming call 0 of both ranks and
rank 0's watchdog report. The control, the same suite without the swap
and the sleep, passes with the ranks agreeing.

Needs ``mpirun`` (Debian's openmpi-bin); skipped without it unless
``ENTANGLE_JAX_REQUIRE_MPI=1``. Outside Bazel, as
tests/ways_in/ranks_plugin_test.py.
"""

import pathlib
import subprocess
import tempfile
import textwrap

from absl.testing import absltest

from tests import test_util

TIMEOUT_S = 240

SUITE = textwrap.dedent(
  """
  import functools, os
  import jax, jax.numpy as jnp
  import numpy as np
  from entangle_jax import declare_target, entangle

  RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])
  SWAP = os.environ.get("SWAP") == "1"

  @functools.cache
  def registered():
    # After the plugin started the sanitizer: the target is wrapped.
    from entangle_jax.testing import _example_resource_ffi as ffi
    jax.ffi.register_ffi_target(
      "sanitized_allreduce", ffi.registrations()["write_slot"],
      platform="cpu",
    )
    declare_target(
      "sanitized_allreduce", communicates={"kind": "collective"}
    )

  def allreduce(x, **delay):
    registered()
    call = jax.ffi.ffi_call(
      "sanitized_allreduce", jax.ShapeDtypeStruct(x.shape, jnp.int32),
      has_side_effect=True,
    )
    return call(x, jnp.ones(x.shape), **delay)

  def test_two_allreduces():
    def f(x, y):
      first, second = (y, x) if SWAP and RANK == 1 else (x, y)
      delay = {"delay_us": np.int64(3_000_000)} if SWAP and RANK == 0 else {}
      a = allreduce(first, **delay)
      return a, allreduce(entangle(second, a))
    small = jnp.arange(4, dtype=jnp.int32)
    jax.block_until_ready(jax.jit(f)(small, jnp.arange(8, dtype=jnp.int32)))
  """
)


class SanitizeRanksPluginTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    test_util.needs_mpirun(self)
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    self.folder = pathlib.Path(folder.name)
    (self.folder / "test_ranks.py").write_text(SUITE)

  def run_ranks(self, swap: bool) -> tuple[int, str]:
    return test_util.mpirun_pytest(
      self.folder,
      "--entangle-sanitize",
      f"--entangle-sanitize-ranks={self.folder / 'ranks'}",
      "--entangle-watchdog=1",
      swap=swap,
      timeout=TIMEOUT_S,
    )

  def test_ranks_in_one_order_pass(self):
    status, output = self.run_ranks(swap=False)
    self.assertEqual(status, 0, output)
    self.assertIn("entangle-jax sanitizer across 2 ranks", output)
    self.assertIn("communicating calls agree: 2 call(s) on each rank", output)
    self.assertIn("rank 1: its communicating calls are in", output)
    self.assertNotIn("watchdog", output)

  def test_a_swap_and_a_call_past_the_limit_fail_the_run_on_rank_0(self):
    status, output = self.run_ranks(swap=True)
    self.assertNotEqual(status, 0, output)
    self.assertIn("communicating calls DIFFER at call 0", output)
    self.assertRegex(
      output, r"rank 0: call 0: collective sanitized_allreduce \(s32\[4\]"
    )
    self.assertRegex(
      output, r"rank 1: call 0: collective sanitized_allreduce \(s32\[8\]"
    )
    # Rank 0's watchdog saw its first call in flight, on stderr as it
    # happened and in the merge.
    self.assertIn("entangle_jax sanitizer watchdog (rank 0 of 2", output)
    self.assertIn("rank 0: a call was in flight past the watchdog's", output)


class SanitizeRanksUsageTest(absltest.TestCase):
  def run_pytest(self, *args: str) -> subprocess.CompletedProcess:
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    path = pathlib.Path(folder.name)
    (path / "test_nothing.py").write_text("def test_nothing():\n  pass\n")
    return test_util.pytest_run(path, *args)

  def test_each_flag_names_what_is_wrong(self):
    for args, said in (
      (["--entangle-sanitize", "--entangle-sanitize-ranks=out"],
       "no rank of a launch"),
      (["--entangle-watchdog=5"], "applies to --entangle-sanitize runs"),
      (["--entangle-sanitize", "--entangle-watchdog=soon"],
       "--entangle-watchdog=soon"),
      (["--entangle-sanitize", "--entangle-watchdog-exit"],
       "needs --entangle-watchdog"),
    ):  # fmt: skip
      with self.subTest(args=args):
        run = self.run_pytest(*args)
        self.assertEqual(run.returncode, 4, run.stdout + run.stderr)
        self.assertIn(said, run.stderr)
    # Control: a watchdog on a sanitized run that needs none passes.
    run = self.run_pytest("--entangle-sanitize", "--entangle-watchdog=5")
    self.assertEqual(run.returncode, 0, run.stdout + run.stderr)


if __name__ == "__main__":
  absltest.main()
