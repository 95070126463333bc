"""Shapes that issue 77's generated corpus (`benchmarks.rank_corpus`)
found reported though right, reduced and run again under ``mpirun``
(data/ranks_mpi4jax_corpus/README.md has the programs and their runs),
each with a control that hangs.

The runs that ended are checked as ``--ranks`` checks them, with their
execution records. A control that hung left its record incomplete (so
``--ranks`` answers "not proved" whatever the modules say); it is checked
by `races_across` on its modules, with the layout each rank's program
used: ``COMM_WORLD``, spanning every rank in order.
"""

import io
import pathlib

from absl.testing import absltest

from entangle_jax.testing import CrossRankResult, races_across
from entangle_jax.testing._analysis import communicators
from entangle_jax.testing._analysis.ranks import RankProgram
from entangle_jax.testing._ways_in import command
from tests.ways_in import across_ranks_test as base

CORPUS = (
  pathlib.Path(__file__).resolve().parent / "data" / "ranks_mpi4jax_corpus"
)


def folders(shape: str, ranks: int) -> list[str]:
  return [str(CORPUS / shape / f"rank{rank}") for rank in range(ranks)]


def ranks_command(shape: str, ranks: int) -> tuple[int, str]:
  out, err = io.StringIO(), io.StringIO()
  with base.shipped_mpi4jax():
    status = command.main(["--ranks", *folders(shape, ranks)], out=out, err=err)
  return status, out.getvalue() + err.getvalue()


def modules_checked(shape: str, ranks: int) -> CrossRankResult:
  """`races_across` on each rank's ``jit_f`` module, every communicator
  it names given the world's layout (the program used ``COMM_WORLD``)."""
  with base.shipped_mpi4jax():
    texts, layouts = [], []
    for folder in folders(shape, ranks):
      (path,) = pathlib.Path(folder).glob("*.jit_f.cpu_after_optimizations.txt")
      text = path.read_text()
      calls = RankProgram(text).calls()
      world = tuple(range(ranks))
      texts.append(text)
      layouts.append(dict.fromkeys(communicators.handles(calls), world))
    return races_across(texts, communicators=layouts)


class BroadcastDecisionTest(absltest.TestCase):
  """Rank 0 decides on ``x[0] + 1`` and broadcasts it, and every rank
  branches on what it gets around an allreduce. XLA computes ``x[:1] +
  1`` twice on rank 0: once for the broadcast, once fused into the
  decision. The decision read a copy of the broadcast's operand, an
  expression of rank 0's own input, and was reported rank-dependent."""

  def test_the_decision_on_a_copy_of_what_the_root_sends_is_proved(self):
    # Ran right: both ranks allreduced ([10, 12, 14, 16] on each).
    status, said = ranks_command("bcast_dup_ok", 2)
    self.assertEqual(status, 0, said)
    self.assertIn("Proved: the 2 ranks make 2 communicating calls", said)

  def test_control_deciding_on_another_expression_is_rank_dependent(self):
    # Rank 0 broadcasts x[0] + 2 and decides on x[0] + 1 itself: it
    # takes the branch without the allreduce, rank 1 the other, and hung
    # there (its watchdog ended the run after 20 s).
    result = modules_checked("bcast_dup_other", 2)
    self.assertEqual(result.verdict, "rank-dependent", result.text())


class SharedResultAfterMessagesTest(absltest.TestCase):
  """Three ranks: ranks 0 and 1 send to rank 2, which receives from each;
  then every rank allreduces ``x[:1]`` and ``x[:1] + 100``, and branches
  on the first around an allreduce. Rank 2 made one call more before the
  allreduces than each sender, and a shared result was named by its
  place among all the rank's calls: the ranks' decisions read
  "different" allreduces, and were reported rank-dependent."""

  def test_a_decision_on_an_allreduce_after_a_gather_is_proved(self):
    # Ran right: every rank took the allreduce (30 > 15).
    status, said = ranks_command("gather_decide_ok", 3)
    self.assertEqual(status, 0, said)
    self.assertIn("Proved: the 3 ranks make 5 communicating calls", said)

  def test_control_deciding_on_another_allreduce_is_rank_dependent(self):
    # Rank 2 decides on the second allreduce (330 > 100), the others on
    # the first (30 > 100): rank 2 hung in the allreduce alone.
    result = modules_checked("gather_decide_other", 3)
    self.assertEqual(result.verdict, "rank-dependent", result.text())


class LoopBesideAFinishedRankTest(absltest.TestCase):
  """Three ranks: rank 1 sends to rank 0 in a ``fori_loop(0, 3)``, rank 0
  receives in its own, and rank 2's loop communicates not at all (its
  module makes no call). The two loops differ (a send, a receive), so
  they are run as their bodies; that was refused where a rank had no
  call left, and the check said deadlock."""

  def test_a_loop_of_messages_beside_a_rank_with_none_is_proved(self):
    # Ran right: rank 0 got 3 * (x1 + 2) = [36, 39, 42, 45].
    status, said = ranks_command("loop_p2p_three", 3)
    self.assertEqual(status, 0, said)
    self.assertIn("Proved: the 3 ranks make 3 communicating calls", said)

  def test_control_one_receive_too_many_is_a_deadlock(self):
    # Rank 0 loops 4 times, rank 1 3 times: rank 0 hung in its 4th
    # receive.
    result = modules_checked("loop_p2p_three_short", 3)
    self.assertEqual(result.verdict, "deadlock", result.text())


class BranchOfMessagesBesideARankTest(absltest.TestCase):
  """Three ranks allreduce ``x[:1]`` and branch on it; the branch taken
  sends ``x`` from rank 0 to rank 1, and rank 2 makes no call in either
  branch (its module has no conditional among its calls). Ranks 0 and 1
  were at a conditional, rank 2 past it, and the check said deadlock."""

  def test_a_branch_of_messages_between_two_of_three_is_proved(self):
    # Ran right: rank 1 got rank 0's x, [0, 1, 2, 3].
    status, said = ranks_command("cond_pair_three", 3)
    self.assertEqual(status, 0, said)
    self.assertIn("Proved: the 3 ranks make 2 communicating calls", said)

  def test_control_a_receive_too_many_in_the_branch_is_a_deadlock(self):
    # Rank 1 receives twice, rank 0 sends once: rank 1 hung.
    result = modules_checked("cond_pair_three_short", 3)
    self.assertEqual(result.verdict, "deadlock", result.text())


if __name__ == "__main__":
  absltest.main()
