"""The benchmark's statistics, on synthetic rounds (nothing is timed here)."""

import importlib.util
import pathlib
import statistics
import sys

from absl.testing import absltest

_SOURCE = (
  pathlib.Path(__file__).resolve().parent.parent / "tools/bench_stats.py"
)


def _load_bench_stats():
  # tools/ is not a package; load the module from its file.
  spec = importlib.util.spec_from_file_location("bench_stats", _SOURCE)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  # Dataclasses look their module up in sys.modules while being created.
  sys.modules.setdefault("bench_stats", module)
  spec.loader.exec_module(module)
  return module


@absltest.skipUnless(
  _SOURCE.exists(), "tools/bench_stats.py is not among this test's files"
)
class BenchStatsTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.stats = _load_bench_stats()

  def test_quantile_interpolates_between_order_statistics(self):
    values = [4.0, 1.0, 3.0, 2.0]
    self.assertEqual(self.stats.quantile(values, 0.0), 1.0)
    self.assertEqual(self.stats.quantile(values, 1.0), 4.0)
    self.assertAlmostEqual(self.stats.quantile(values, 0.5), 2.5)
    self.assertAlmostEqual(self.stats.quantile(values, 0.25), 1.75)

  def test_quantile_rejects_bad_input(self):
    with self.assertRaisesRegex(ValueError, "no values"):
      self.stats.quantile([], 0.5)
    with self.assertRaisesRegex(ValueError, "1.5"):
      self.stats.quantile([1.0], 1.5)

  def test_spread(self):
    s = self.stats.spread([5.0, 1.0, 3.0, 2.0, 4.0])
    self.assertEqual((s.median, s.q1, s.q3), (3.0, 2.0, 4.0))
    self.assertEqual((s.low, s.high, s.n), (1.0, 5.0, 5))

  def test_bootstrap_ci_brackets_the_median_and_is_reproducible(self):
    values = [10.0, 11.0, 9.0, 10.5, 9.5, 10.2, 30.0, 9.8]
    lo, hi = self.stats.bootstrap_ci(values)
    self.assertLessEqual(lo, statistics.median(values))
    self.assertGreaterEqual(hi, statistics.median(values))
    self.assertLess(hi, 30.0)  # The median shrugs off the outlier.
    self.assertEqual((lo, hi), self.stats.bootstrap_ci(values))

  def test_bootstrap_ci_needs_two_values(self):
    with self.assertRaisesRegex(ValueError, "got 1"):
      self.stats.bootstrap_ci([1.0])

  def test_paired_and_ratios_pair_rounds(self):
    self.assertEqual(self.stats.paired([3.0, 5.0], [1.0, 1.0]), [2.0, 4.0])
    self.assertEqual(self.stats.ratios([3.0, 5.0], [1.5, 2.0]), [2.0, 2.5])
    with self.assertRaisesRegex(ValueError, "unpaired"):
      self.stats.paired([1.0], [1.0, 2.0])
    with self.assertRaises(ZeroDivisionError):
      self.stats.ratios([1.0], [0.0])

  def test_relative_noise_is_the_far_end_of_the_median_gap_interval(self):
    base = [2.0] * 5
    self.assertAlmostEqual(self.stats.relative_noise([2.1] * 5, base), 0.05)
    self.assertAlmostEqual(self.stats.relative_noise([1.9] * 5, base), 0.05)
    # One wild round moves the median gap little.
    again = [2.0, 2.02, 1.98, 2.0, 4.0, 2.01, 1.99]
    noise = self.stats.relative_noise(again, [2.0] * 7)
    self.assertGreater(noise, 0.0)
    self.assertLess(noise, 0.02)
    with self.assertRaisesRegex(ValueError, "got 1"):
      self.stats.relative_noise([1.0], [1.0])

  def test_clear_difference_is_reported(self):
    higher = self.stats.compare([20.0, 22.0, 19.0, 21.0, 23.0, 20.5], 2.0)
    self.assertEqual(higher.conclusion, "higher")
    self.assertEqual(higher.threshold, 2.0)
    lower = self.stats.compare([-20.0, -22.0, -19.0, -21.0, -23.0], 2.0)
    self.assertEqual(lower.conclusion, "lower")

  def test_difference_below_noise_floor_is_parity(self):
    # Consistently positive (the interval excludes zero) but smaller than
    # what identity against identity produced in the same run.
    verdict = self.stats.compare([2.0, 2.5, 3.0, 2.2, 2.8], 6.0)
    self.assertGreater(verdict.ci[0], 0.0)
    self.assertEqual(verdict.conclusion, self.stats.PARITY)

  def test_difference_whose_interval_spans_zero_is_parity(self):
    verdict = self.stats.compare([10.0, -9.0, 12.0, -11.0, 8.0, -10.0], 0.1)
    self.assertLess(verdict.ci[0], 0.0)
    self.assertGreater(verdict.ci[1], 0.0)
    self.assertEqual(verdict.conclusion, self.stats.PARITY)

  def test_negative_threshold_is_rejected(self):
    with self.assertRaisesRegex(ValueError, "-1"):
      self.stats.compare([1.0, 2.0], -1.0)


if __name__ == "__main__":
  absltest.main()
