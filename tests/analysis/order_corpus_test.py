"""The generated corpus (`benchmarks.order_corpus`): no program the check
proves runs wrong, and no program ordered by data on every path is
reported (issue 76).

The size is ``ENTANGLE_JAX_CORPUS_SIZE`` (default 24, what CI's budget
fits); ``python -m benchmarks.order_corpus --size 300`` runs a large one
on demand, with the check's time against XLA's compile.
"""

import os

from absl.testing import absltest

from benchmarks import order_corpus

SIZE = int(os.environ.get("ENTANGLE_JAX_CORPUS_SIZE", "24"))


class OrderCorpusTest(absltest.TestCase):
  def test_nothing_proved_runs_wrong_and_no_false_report(self):
    counts = order_corpus.run_corpus(SIZE)
    described = "\n".join(
      p.describe() for p in [*counts.unsound, *counts.false]
    )
    self.assertEqual(counts.proved_wrong, 0, described)
    self.assertEqual(counts.false_reports, 0, described)
    # The control: the corpus holds programs that run wrong, and the
    # check reports each of them.
    self.assertGreater(counts.reported_wrong, 0, counts.table())

  def test_a_threaded_program_without_its_last_token_loses_writes(self):
    """The corpus's own control: a threaded program whose write has no
    side effect is ordered only while its last token is used; without it
    XLA may delete the write (only a barrier uses it), and the check says
    so."""
    steps = (
      ("read", False, True, True),
      ("write", False, True, True, 3.0),
      ("wait", "barrier"),  # JAX keeps the write: the barrier uses it.
    )
    program = order_corpus.Program(0, True, steps)
    outcome = order_corpus.run_one(program)
    self.assertEqual(outcome.pairs, 0, program.describe())
    dropped = order_corpus.Program(
      program.seed, program.threaded, program.steps, keep_token=False
    )
    self.assertGreater(order_corpus.run_one(dropped).pairs, 0)


if __name__ == "__main__":
  absltest.main()
