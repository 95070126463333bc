"""The cross-rank check on real mpi4jax programs under ``mpirun -n 2``
and ``-n 3``, live (issues 70 and 77).

Two things the stored modules of data/ranks_mpi4jax/ cannot show:

* that a new mpi4jax or jax still compiles each shape into what the check
  reads: ``make_modules.py`` runs anew (one ``mpirun`` for every shape),
  and ``races_across`` and ``--ranks`` must give each freshly compiled
  shape the verdict of that folder's README.md table, with the
  declarations in effect (mpi4jax's shipped ones, because it is
  installed);
* that the verdicts mean what they say at run time (mpirun_worker.py):
  the proved program computes the right values on both ranks; the program
  whose rank 1 makes its two allreduces in the other order is flagged and
  aborts in MPI; with sizes that agree it computes wrong values, and the
  check names the swap by its operands' origins (issue 77); on three
  ranks, where only rank 2 swaps them, the check names rank 2.

Needs Open MPI's ``mpirun`` and mpi4jax (with mpi4py) in this interpreter.
Without them the test skips and says which is missing, unless
``ENTANGLE_JAX_REQUIRE_MPI=1`` (CI's release lane, which installs both:
.ci/run), which makes that a failure. Every ``mpirun`` has an outer
timeout, and each rank of the worker a watchdog, so that a hang fails
with the ranks' output instead of stopping the run.
"""

import functools
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from absl.testing import absltest

from entangle_jax.testing import CrossRankResult, races_across
from tests import test_util

REQUIRE_MPI = os.environ.get("ENTANGLE_JAX_REQUIRE_MPI") == "1"
HERE = pathlib.Path(__file__).resolve().parent
SHAPES = HERE / "data" / "ranks_mpi4jax"
WORKER = HERE / "mpirun_worker.py"
LAYOUT_WORKER = HERE / "mpirun_layout_worker.py"
# Each mpirun's limit. Measured on 2 idle cores: 5.5 s for the 11
# compiles, 2 s for a worker run; a CI machine at load average 10 is
# several times slower. The worker's ranks end themselves after 60 s.
MPIRUN_TIMEOUT_S = 180
# x = arange(4) + rank on each of the two ranks: their sum.
SUM = [1.0, 3.0, 5.0, 7.0]


def missing() -> str | None:
  """What this machine lacks for the test, or None."""
  if shutil.which("mpirun") is None:
    return "no `mpirun` on PATH (Debian's openmpi-bin, libopenmpi-dev)"
  for module in ("mpi4py", "mpi4jax"):
    if importlib.util.find_spec(module) is None:
      return (
        f"{module} is not installed (requirements-mpi.lock; .ci/run's "
        "release lane says how to build mpi4jax)"
      )
  return None


def mpirun(*args: str, ranks: int = 2) -> tuple[int, str]:
  """``mpirun -n RANKS`` of this interpreter with `args`
  (`MPIRUN_TIMEOUT_S`)."""
  return test_util.run_mpirun(*args, timeout=MPIRUN_TIMEOUT_S, ranks=ranks)


def readme_verdicts() -> dict[str, str]:
  """{shape: what the check says} from data/ranks_mpi4jax/README.md's
  table: ``proved``, ``mismatch at call K``, ``rank-dependent`` or
  ``deadlock``."""
  found = {}
  for line in (SHAPES / "README.md").read_text().splitlines():
    row = re.fullmatch(r"\| `(\w+)`[^|]*\| ([^|]+?) \|", line)
    if row:
      found[row[1]] = row[2]
  return found


def across(files: list[pathlib.Path]) -> CrossRankResult:
  """`races_across` of `files` (one module a rank), each on mpi4jax's
  default communicator: ``COMM_WORLD``'s clone, which numbers the ranks
  as the world does (their sendrecv's peers are then world ranks). The
  layout control, `LayoutTest`, records it instead."""
  return races_across(files, communicators=test_util.world_numbered(files))


def rank_files(folder: pathlib.Path, ranks: int = 2) -> list[pathlib.Path]:
  """The one module each rank wrote under `folder`, rank 0 first."""
  files = []
  for rank in range(ranks):
    (file,) = (folder / f"rank{rank}").glob("*after_optimizations.txt")
    files.append(file)
  return files


@functools.cache
def compiled_shapes() -> pathlib.Path:
  """A folder where make_modules.py has just compiled every shape, each
  rank its own module (one ``mpirun`` for all, made once)."""
  out = pathlib.Path(tempfile.mkdtemp(prefix="mpirun-shapes-"))
  status, output = mpirun(str(SHAPES / "make_modules.py"), str(out))
  assert status == 0, f"make_modules.py under mpirun failed:\n{output}"
  return out


@functools.cache
def worker_run(*programs: str, ranks: int = 2) -> tuple[int, str, pathlib.Path]:
  """mpirun_worker.py's run of `programs` on `ranks` ranks (once): exit
  status, output, and its folder."""
  out = pathlib.Path(tempfile.mkdtemp(prefix="mpirun-worker-"))
  status, output = mpirun(str(WORKER), str(out), *programs, ranks=ranks)
  return status, output, out


def results(
  out: pathlib.Path, program: str, ranks: int = 2
) -> list[list[list[float]]]:
  """Each rank's two results of `program`, rank 0 first."""
  return [
    json.loads((out / program / f"rank{rank}.json").read_text())
    for rank in range(ranks)
  ]


def skip_without_mpi() -> None:
  """Skips the class where this machine lacks what it needs (`missing`),
  or fails it there under ``ENTANGLE_JAX_REQUIRE_MPI=1``."""
  reason = missing()
  if reason is not None:
    if REQUIRE_MPI:
      raise AssertionError(f"ENTANGLE_JAX_REQUIRE_MPI=1, but {reason}")
    print(f"skipping: {reason}")
    raise unittest.SkipTest(reason)


class MpirunTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    skip_without_mpi()

  def assert_verdict(self, result: CrossRankResult, said: str, what: str):
    """`result` is what the README says (`said`): for a mismatch, at the
    call it names on both ranks; for a proof, of at least one matched call
    (with no call seen, every program is "proved")."""
    verdict, _, at = said.partition(" at call ")
    self.assertEqual(result.verdict, verdict, f"{what}:\n{result.text()}")
    if verdict == "proved":
      self.assertNotEmpty(result.matched, f"{what}: no communicating call")
    if at:
      assert result.mismatch is not None
      indices = [c.index for c in result.mismatch.calls if c is not None]
      self.assertEqual(indices, [int(at)] * 2, f"{what}:\n{result.text()}")

  def test_each_shape_compiled_now_gets_the_readme_verdict(self):
    out = compiled_shapes()
    said = readme_verdicts()
    # Every row of the table was read: one per stored shape.
    self.assertLen(said, len([p for p in SHAPES.iterdir() if p.is_dir()]))
    self.assertEqual(sorted(p.name for p in out.iterdir()), sorted(said))
    for shape, verdict in said.items():
      result = across(rank_files(out / shape))
      self.assert_verdict(result, verdict, shape)

  def test_the_command_gives_each_shape_its_verdict(self):
    # Each rank's modules in one dump folder, in the table's order (the
    # command pairs the ranks' modules in dump order), and one run of
    # `python -m entangle_jax.testing --ranks` on them.
    out, said = compiled_shapes(), readme_verdicts()
    dumps = pathlib.Path(tempfile.mkdtemp(prefix="mpirun-dumps-"))
    for number, shape in enumerate(said, start=1):
      for rank, file in enumerate(rank_files(out / shape)):
        name = file.name.replace("module_0001.", f"module_{number:04d}.")
        (dumps / f"rank{rank}").mkdir(exist_ok=True)
        shutil.copy(file, dumps / f"rank{rank}" / name)
    run = subprocess.run(
      [sys.executable, "-m", "entangle_jax.testing", "--ranks"]
      + [str(dumps / f"rank{rank}") for rank in (0, 1)]
      + ["--json"],
      capture_output=True,
      text=True,
      env=test_util.child_env(),
      timeout=MPIRUN_TIMEOUT_S,
      check=False,
    )
    self.assertEqual(run.returncode, 1, run.stderr)  # Some are not proved.
    found = {
      m["module"]: m["verdict"] for m in json.loads(run.stdout)["modules"]
    }
    # Without a record, no communicator's layout is known: what is
    # proved with it is not proved (what is found is found).
    expected = {
      f"jit_{s}": v.partition(" at call ")[0] for s, v in said.items()
    }
    expected = {
      m: "unseen-communicators" if v == "proved" else v
      for m, v in expected.items()
    }
    self.assertEqual(found, expected)

  def test_the_proved_program_runs_right_on_both_ranks(self):
    status, output, out = worker_run("same_order", "swapped_same_size")
    self.assertEqual(status, 0, output)
    result = across(rank_files(out / "same_order"))
    self.assert_verdict(result, "proved", "same_order")
    self.assertLen(result.matched, 2)
    self.assertEqual(results(out, "same_order"), [[SUM, SUM * 2]] * 2)

  def test_the_swapped_program_is_flagged_and_aborts(self):
    status, output, out = worker_run("swapped")
    result = across(rank_files(out / "swapped"))
    self.assert_verdict(result, "mismatch at call 1", "swapped")
    assert result.mismatch is not None
    self.assertIn("f32[8]", result.mismatch.differs)
    # Each rank's first allreduce meets the other's, of another size.
    self.assertNotEqual(status, 0, output)
    self.assertIn("MPI_ERR_TRUNCATE", output)
    ran = [(out / "swapped" / f"rank{r}.json").exists() for r in (0, 1)]
    self.assertNotEqual(ran, [True, True], output)

  def test_swapped_with_one_size_runs_wrong_and_is_a_mismatch(self):
    # Both allreduces are the same call by type (f32[4], MPI.SUM), so MPI
    # sums each rank's first operand with the other's. Issue 77: their
    # operands' origins (x, and 10 * x) are crossed on rank 1, so the
    # check names the swap instead of proving the order.
    status, output, out = worker_run("same_order", "swapped_same_size")
    self.assertEqual(status, 0, output)
    result = across(rank_files(out / "swapped_same_size"))
    self.assert_verdict(result, "mismatch at call 1", "swapped_same_size")
    assert result.mismatch is not None
    self.assertIn("the two calls are swapped", result.mismatch.differs)
    x0, x1 = [0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]
    first = [a + 10 * b for a, b in zip(x0, x1, strict=True)]  # x0 + 10 x1
    second = [10 * a + b for a, b in zip(x0, x1, strict=True)]  # 10 x0 + x1
    right = [SUM, [10 * v for v in SUM]]
    got = results(out, "swapped_same_size")
    self.assertEqual(got, [[first, second], [second, first]])
    self.assertNotIn(right, got)


class LayoutTest(absltest.TestCase):
  """A sendrecv with "the other rank" on a communicator that numbers the
  ranks as the world does, and on one that numbers them the other way
  round (``Split(0, size - 1 - rank)``): the modules are alike, so only
  the layout ``record_executions`` records tells them apart (skeptic pass
  77b, U3: the reversed one was proved). Through that layout the peers
  are world ranks (issue 77): "the other rank" numbered as the reversed
  communicator does is proved."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    skip_without_mpi()
    cls.out = pathlib.Path(tempfile.mkdtemp(prefix="mpirun-layouts-"))
    for name in ("world", "reversed", "reversed_numbered"):
      status, output = mpirun(str(LAYOUT_WORKER), str(cls.out), name)
      assert status == 0, f"{name}:\n{output}"

  def ranks_command(self, name: str) -> tuple[int, str]:
    run = subprocess.run(
      [sys.executable, "-m", "entangle_jax.testing", "--ranks"]
      + [str(self.out / name / f"rank{rank}") for rank in (0, 1)],
      capture_output=True,
      text=True,
      env=test_util.child_env(),
      timeout=MPIRUN_TIMEOUT_S,
      check=False,
    )
    return run.returncode, run.stdout + run.stderr

  def got(self, name: str) -> list[list[float]]:
    return [
      json.loads((self.out / name / f"rank{rank}.json").read_text())
      for rank in (0, 1)
    ]

  def test_the_worlds_numbering_is_recorded_and_proved(self):
    status, out = self.ranks_command("world")
    self.assertEqual(status, 0, out)
    self.assertIn("Proved", out)
    # Each rank received the other's x = arange(4) + rank.
    self.assertEqual(
      self.got("world"), [[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 2.0, 3.0]]
    )

  def test_the_reversed_numbering_is_recorded_and_not_proved(self):
    status, out = self.ranks_command("reversed")
    self.assertEqual(status, 2, out)
    self.assertIn("numbers the ranks otherwise than the world does", out)
    self.assertIn("world rank [1, 0][k]", out)
    # "The other rank" was the rank itself: each received its own x.
    self.assertEqual(
      self.got("reversed"), [[0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]]
    )

  def test_the_reversed_numbering_followed_is_proved(self):
    status, out = self.ranks_command("reversed_numbered")
    self.assertEqual(status, 0, out)
    self.assertIn("Proved", out)
    self.assertIn("its communicator's rank 0 is world rank 1", out)
    self.assertEqual(
      self.got("reversed_numbered"),
      [[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 2.0, 3.0]],
    )


class ThreeRanksTest(absltest.TestCase):
  """``mpirun -n 3``, where only rank 2 differs (issue 77): the check
  must compare every rank with rank 0, not stop at two."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    skip_without_mpi()

  def test_the_proved_program_runs_right_on_three_ranks(self):
    status, output, out = worker_run("same_order", ranks=3)
    self.assertEqual(status, 0, output)
    result = across(rank_files(out / "same_order", 3))
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)
    # arange(4) + rank summed over ranks 0, 1 and 2.
    three = [3.0 * v + 3.0 for v in range(4)]
    self.assertEqual(
      results(out, "same_order", 3),
      [[three, three * 2]] * 3,  # tile(x, 2)
    )

  def test_rank_2_swapping_one_size_is_a_mismatch_and_runs_wrong(self):
    status, output, out = worker_run("same_order", "swapped_same_size", ranks=3)
    self.assertEqual(status, 0, output)
    result = across(rank_files(out / "swapped_same_size", 3))
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("the two calls are swapped", result.mismatch.differs)
    self.assertRegex(result.text(), r"\brank 2\b")
    x = [[float(k + r) for k in range(4)] for r in range(3)]
    # Rank 2's second operand (10 x2) meets ranks 0 and 1's first.
    first = [a + b + 10 * c for a, b, c in zip(*x, strict=True)]
    right = [3.0 * v + 3.0 for v in range(4)]
    got = results(out, "swapped_same_size", 3)
    for rank in (0, 1):
      self.assertEqual(got[rank][0], first, output)
    self.assertEqual(got[2][1], first, output)
    self.assertNotIn(right, [r[0] for r in got])


if __name__ == "__main__":
  absltest.main()
