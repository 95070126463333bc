"""The cross-rank check on modules that two jax.distributed processes
compiled (gloo over loopback, one CPU device each; issue 70).

The workers (across_ranks_worker.py) compile each shape with the rank as a
Python value and run only the ones the check proves; each has a watchdog,
and this test an outer timeout.
"""

import os
import pathlib
import tempfile

from absl.testing import absltest

from entangle_jax.testing import races_across
from entangle_jax.testing._analysis import same_module
from tests import test_util

WORKER = os.path.join(
  os.path.dirname(os.path.abspath(__file__)), "across_ranks_worker.py"
)
TIMEOUT_S = 200


class DistributedTest(absltest.TestCase):
  def test_two_processes_compile_and_the_check_tells_them_apart(self):
    out = pathlib.Path(tempfile.mkdtemp())
    runs = test_util.run_two_processes(WORKER, str(out), timeout=TIMEOUT_S)
    same = same_module.collectives_need_same_module()
    for i, (returncode, output) in enumerate(runs):
      self.assertEqual(returncode, 0, f"process {i}:\n{output}")
      done = (
        "unordered_ipo hung, its modules differing"
        if same
        else "compiled 4, ran ordered and unordered_ipo"
      )
      self.assertIn(f"process {i}: {done}", output)

    def verdict(shape: str):
      return races_across([out / shape / f"rank{r}.txt" for r in (0, 1)])

    ordered = verdict("ordered")
    self.assertEqual(ordered.verdict, "proved", ordered.text())
    self.assertEqual(
      [s.calls[0].label.split()[1] for s in ordered.matched],
      ["all-reduce", "all-gather"],
    )
    swapped = verdict("swapped")
    self.assertEqual(swapped.verdict, "mismatch", swapped.text())
    unordered = verdict("unordered")
    self.assertEqual(unordered.verdict, "deadlock", unordered.text())
    self.assertTrue(unordered.unordered)
    # in_program_order orders XLA's collectives in each process: the same
    # program is proved, and ran to the right value (the worker's check);
    # where XLA's collectives need every rank to run the same module, the
    # ranks' modules differing is a mismatch, and the run hung.
    fixed = verdict("unordered_ipo")
    if same:
      self.assertEqual(fixed.verdict, "mismatch", fixed.text())
      assert fixed.mismatch is not None
      self.assertIn("the ranks run different modules", fixed.mismatch.differs)
      return
    self.assertEqual(fixed.verdict, "proved", fixed.text())
    self.assertEqual(
      [s.calls[0].label.split()[1] for s in fixed.matched],
      ["all-reduce", "all-gather"],
    )


if __name__ == "__main__":
  absltest.main()
