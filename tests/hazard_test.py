"""The seed's runtime hazard: wrong without entangle, never wrong with it."""

from absl.testing import absltest

from entangle_jax import _hazard
from entangle_jax._hazard import Ordering
from tests import test_util  # noqa: F401  (sets up 8 CPU devices)


class HazardTest(absltest.TestCase):
  def test_without_ordering_the_read_is_sometimes_wrong(self):
    # The control experiment: without it the next test would prove nothing.
    self.assertGreater(_hazard.count_wrong(Ordering.NONE, runs=100), 0)

  def test_optimization_barrier_does_not_order_on_cpu(self):
    self.assertGreater(
      _hazard.count_wrong(Ordering.OPTIMIZATION_BARRIER, runs=100), 0
    )

  def test_with_entangle_the_read_is_never_wrong(self):
    self.assertEqual(_hazard.count_wrong(Ordering.ENTANGLE, runs=1000), 0)


if __name__ == "__main__":
  absltest.main()
