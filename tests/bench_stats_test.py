"""The benchmark's statistics and derived metrics, on synthetic rounds.

Nothing is timed here: the inputs are made-up per-round times.
"""

import importlib.util
import pathlib
import statistics
import sys

from absl.testing import absltest

_TOOLS = pathlib.Path(__file__).resolve().parent.parent / "tools"
_SOURCE = _TOOLS / "bench_stats.py"


def _load(name: str):
  # tools/ is not a package; load the module from its file. bench_report
  # imports bench_stats by name, so load that one first.
  if name in sys.modules:
    return sys.modules[name]
  spec = importlib.util.spec_from_file_location(name, _TOOLS / f"{name}.py")
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  # Dataclasses look their module up in sys.modules while being created.
  sys.modules[name] = module
  spec.loader.exec_module(module)
  return module


@absltest.skipUnless(
  _SOURCE.exists(), "tools/bench_stats.py is not among this test's files"
)
class BenchStatsTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.stats = _load("bench_stats")

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


def _rounds(seconds: dict[str, float], jitter: list[float]) -> list[dict]:
  keys = (
    "scan_1x1_s",
    "scan_3x4_s",
    "resource_1e+03_s",
    "resource_1e+05_s",
    "donated_1e+05_s",
  )
  return [
    {key: seconds.get(key, 1e-3) * factor for key in keys} for factor in jitter
  ]


@absltest.skipUnless(
  (_TOOLS / "bench_report.py").exists(),
  "tools/bench_report.py is not among this test's files",
)
class BenchReportTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    _load("bench_stats")
    cls.report = _load("bench_report")

  def _timings(self, ours_extra_s: float) -> dict:
    # Every implementation shares the round's jitter (a busy minute hits all
    # of them); ours is slower than the identity by a fixed amount.
    jitter = [1.0, 1.3, 0.9, 1.1, 1.2, 0.95, 1.05]
    base = _rounds({"scan_1x1_s": 0.01}, jitter)
    ours = _rounds({"scan_1x1_s": 0.01 + ours_extra_s}, jitter)
    report = self.report
    return {
      report.OURS: ours,
      report.PEER: base,
      report.BARRIER: base,
      report.BASELINE: base,
      report.NOISE: _rounds({"scan_1x1_s": 0.01}, jitter[::-1]),
    }

  def test_per_call_cost_is_time_over_identity_per_step(self):
    steps = 1000
    timings = self._timings(ours_extra_s=1e-4)
    derived = self.report.derive(timings, steps)
    jitter = [1.0, 1.3, 0.9, 1.1, 1.2, 0.95, 1.05]
    for value, factor in zip(
      derived[self.report.OURS]["scan_1x1_ns"], jitter, strict=True
    ):
      self.assertAlmostEqual(value, 100.0 * factor)
    self.assertEqual(derived[self.report.BASELINE]["scan_1x1_ns"], [0.0] * 7)
    self.assertEqual(derived[self.report.OURS]["resource_1e5"], [1.0] * 7)

  def _verdict(self, timings: dict, key: str, other: str) -> str:
    derived = self.report.derive(timings, 1000)
    for row in self.report.comparisons(timings, derived):
      if row["metric"].key == key and row["other"] == other:
        return row["verdict"].conclusion
    self.fail(f"no comparison of {key} against {other}")

  def test_slower_implementation_is_reported_higher(self):
    timings = self._timings(ours_extra_s=5e-3)
    self.assertEqual(
      self._verdict(timings, "scan_1x1_ns", self.report.PEER), "higher"
    )

  def test_equal_implementations_are_at_parity(self):
    timings = self._timings(ours_extra_s=0.0)
    for key, other in (
      ("scan_1x1_ns", self.report.PEER),
      ("resource_1e5", self.report.BASELINE),
    ):
      self.assertEqual(
        self._verdict(timings, key, other), "parity within noise"
      )


if __name__ == "__main__":
  absltest.main()
