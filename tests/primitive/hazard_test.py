"""The seed's runtime hazard: wrong without entangle, never wrong with it.

What the compiled module orders is certain, so those facts are asserted
exactly. How often an unordered program actually runs in the wrong order is
up to XLA's scheduler and the machine's load, so the runtime control runs
until the hazard shows (up to `CONTROL_RUNS` runs) instead of asserting a
count from a fixed number of runs, which flaked.
"""

from absl.testing import absltest

from entangle_jax.demo import _hazard
from entangle_jax.demo._hazard import Ordering

CONTROL_RUNS = 2000
"""Where a wrong read shows at all, it shows in every run on the machines we
measured (100 of 100); the margin covers runs that are mostly right."""


class HazardTest(absltest.TestCase):
  def test_without_ordering_the_read_is_sometimes_wrong(self):
    # The control experiment: without it the entangle test would prove
    # nothing at run time.
    self.assertFalse(_hazard.read_precedes_second_write(Ordering.NONE))
    runs = _hazard.runs_until_wrong(Ordering.NONE, max_runs=CONTROL_RUNS)
    self.assertIsNotNone(
      runs,
      f"no wrong read in {CONTROL_RUNS} runs of the unordered program: the "
      "runtime check of entangle below shows nothing on this machine",
    )

  def test_optimization_barrier_does_not_order_on_cpu(self):
    # The module XLA runs has no path from the read to the second write, so
    # nothing orders them; whether a given run goes wrong is left to chance.
    self.assertFalse(
      _hazard.read_precedes_second_write(Ordering.OPTIMIZATION_BARRIER)
    )
    # The control: the same analysis finds entangle's edge.
    self.assertTrue(_hazard.read_precedes_second_write(Ordering.ENTANGLE))

  def test_with_entangle_the_read_is_never_wrong(self):
    self.assertTrue(_hazard.read_precedes_second_write(Ordering.ENTANGLE))
    self.assertEqual(_hazard.count_wrong(Ordering.ENTANGLE, runs=1000), 0)


if __name__ == "__main__":
  absltest.main()
