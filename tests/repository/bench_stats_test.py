"""The benchmark's statistics, derived metrics and report, on synthetic rounds.

Nothing is timed here: the inputs are made-up per-round times. The tables
on docs/performance.md must have the rows and columns the report makes now.
"""

import pathlib
import re
import statistics
import unittest

from absl.testing import absltest

try:
  from benchmarks import comparisons, program_order_compile, stats, suite_cost
  from benchmarks import report as bench_report
  from benchmarks.cases import (
    ANALYSIS_PAIRS,
    BARRIER,
    BASELINE,
    COMPILE_IMPLS,
    COMPILE_SIZES,
    IMPLS,
    METRICS,
    NOISE,
    OURS,
    OURS_AGAIN,
    PEER,
    PO_ORDERED,
    PO_RESOURCE,
    PO_RESOURCE_AGAIN,
    SCAN_STEPS,
    STRUCTURE,
  )
except ModuleNotFoundError as missing:
  if missing.name != "benchmarks":
    raise
  # CI also runs a copy of tests/ against the installed package, away from
  # the checkout: the benchmark is not there to test.
  raise unittest.SkipTest(
    "no benchmarks/ package: tests/ runs from a copy outside the checkout"
  ) from missing

ROOT = pathlib.Path(__file__).resolve().parents[2]


class BenchStatsTest(absltest.TestCase):
  def test_quantile_interpolates_between_order_statistics(self):
    values = [4.0, 1.0, 3.0, 2.0]
    self.assertEqual(stats.quantile(values, 0.0), 1.0)
    self.assertEqual(stats.quantile(values, 1.0), 4.0)
    self.assertAlmostEqual(stats.quantile(values, 0.5), 2.5)
    self.assertAlmostEqual(stats.quantile(values, 0.25), 1.75)

  def test_quantile_rejects_bad_input(self):
    with self.assertRaisesRegex(ValueError, "no values"):
      stats.quantile([], 0.5)
    with self.assertRaisesRegex(ValueError, "1.5"):
      stats.quantile([1.0], 1.5)

  def test_spread(self):
    s = stats.spread([5.0, 1.0, 3.0, 2.0, 4.0])
    self.assertEqual((s.median, s.q1, s.q3), (3.0, 2.0, 4.0))
    self.assertEqual((s.low, s.high, s.n), (1.0, 5.0, 5))

  def test_bootstrap_ci_brackets_the_median_and_is_reproducible(self):
    values = [10.0, 11.0, 9.0, 10.5, 9.5, 10.2, 30.0, 9.8]
    lo, hi = stats.bootstrap_ci(values)
    self.assertLessEqual(lo, statistics.median(values))
    self.assertGreaterEqual(hi, statistics.median(values))
    self.assertLess(hi, 30.0)  # The median shrugs off the outlier.
    self.assertEqual((lo, hi), stats.bootstrap_ci(values))

  def test_bootstrap_ci_needs_two_values(self):
    with self.assertRaisesRegex(ValueError, "got 1"):
      stats.bootstrap_ci([1.0])

  def test_paired_and_ratios_pair_rounds(self):
    self.assertEqual(stats.paired([3.0, 5.0], [1.0, 1.0]), [2.0, 4.0])
    self.assertEqual(stats.ratios([3.0, 5.0], [1.5, 2.0]), [2.0, 2.5])
    with self.assertRaisesRegex(ValueError, "unpaired"):
      stats.paired([1.0], [1.0, 2.0])
    with self.assertRaises(ZeroDivisionError):
      stats.ratios([1.0], [0.0])

  def test_relative_noise_is_the_far_end_of_the_median_gap_interval(self):
    base = [2.0] * 5
    self.assertAlmostEqual(stats.relative_noise([2.1] * 5, base), 0.05)
    self.assertAlmostEqual(stats.relative_noise([1.9] * 5, base), 0.05)
    # One wild round moves the median gap little.
    again = [2.0, 2.02, 1.98, 2.0, 4.0, 2.01, 1.99]
    noise = stats.relative_noise(again, [2.0] * 7)
    self.assertGreater(noise, 0.0)
    self.assertLess(noise, 0.02)
    with self.assertRaisesRegex(ValueError, "got 1"):
      stats.relative_noise([1.0], [1.0])

  def test_clear_difference_is_reported(self):
    higher = stats.compare([20.0, 22.0, 19.0, 21.0, 23.0, 20.5], 2.0)
    self.assertEqual(higher.conclusion, "higher")
    self.assertEqual(higher.threshold, 2.0)
    lower = stats.compare([-20.0, -22.0, -19.0, -21.0, -23.0], 2.0)
    self.assertEqual(lower.conclusion, "lower")

  def test_difference_below_noise_floor_is_parity(self):
    # Consistently positive (the interval excludes zero) but smaller than
    # what identity against identity produced in the same run.
    verdict = stats.compare([2.0, 2.5, 3.0, 2.2, 2.8], 6.0)
    self.assertGreater(verdict.ci[0], 0.0)
    self.assertEqual(verdict.conclusion, stats.PARITY)

  def test_difference_whose_interval_spans_zero_is_parity(self):
    verdict = stats.compare([10.0, -9.0, 12.0, -11.0, 8.0, -10.0], 0.1)
    self.assertLess(verdict.ci[0], 0.0)
    self.assertGreater(verdict.ci[1], 0.0)
    self.assertEqual(verdict.conclusion, stats.PARITY)

  def test_negative_threshold_is_rejected(self):
    with self.assertRaisesRegex(ValueError, "-1"):
      stats.compare([1.0, 2.0], -1.0)


def _rounds(seconds: dict[str, float], jitter: list[float]) -> list[dict]:
  keys = [metric.raw for metric in METRICS]
  return [
    {key: seconds.get(key, 1e-3) * factor for key in keys} for factor in jitter
  ]


JITTER = [1.0, 1.3, 0.9, 1.1, 1.2, 0.95, 1.05]


def _timings(ours_extra_s: float) -> dict:
  # Every implementation shares the round's jitter (a busy minute hits all
  # of them); ours is slower than the identity by a fixed amount.
  base = _rounds({"scan_1x1_s": 0.01}, JITTER)
  return {
    OURS: _rounds({"scan_1x1_s": 0.01 + ours_extra_s}, JITTER),
    PEER: base,
    BARRIER: base,
    BASELINE: base,
    NOISE: _rounds({"scan_1x1_s": 0.01}, JITTER[::-1]),
  }


class BenchReportTest(absltest.TestCase):
  def test_per_call_cost_is_time_over_identity_per_step(self):
    steps = 1000
    derived = comparisons.derive(_timings(ours_extra_s=1e-4), steps)
    for value, factor in zip(derived[OURS]["scan_1x1_ns"], JITTER, strict=True):
      self.assertAlmostEqual(value, 100.0 * factor)
    self.assertEqual(derived[BASELINE]["scan_1x1_ns"], [0.0] * 7)
    self.assertEqual(derived[OURS]["resource_1e5"], [1.0] * 7)

  def _verdict(self, timings: dict, key: str, other: str) -> str:
    derived = comparisons.derive(timings, 1000)
    for row in comparisons.comparisons(timings, derived):
      if row["metric"].key == key and row["other"] == other:
        return row["verdict"].conclusion
    self.fail(f"no comparison of {key} against {other}")

  def test_slower_implementation_is_reported_higher(self):
    timings = _timings(ours_extra_s=5e-3)
    self.assertEqual(self._verdict(timings, "scan_1x1_ns", PEER), "higher")

  def test_equal_implementations_are_at_parity(self):
    timings = _timings(ours_extra_s=0.0)
    for key, other in (("scan_1x1_ns", PEER), ("resource_1e5", BASELINE)):
      self.assertEqual(
        self._verdict(timings, key, other), "parity within noise"
      )


class AnalysisTableTest(absltest.TestCase):
  def test_share_of_compile_time_and_growth(self):
    rounds = [_analysis_round(f) for f in (1.0, 1.1, 0.9)]
    lines = bench_report.analysis_table(rounds)
    small, large = str(2 * ANALYSIS_PAIRS[0]), str(2 * ANALYSIS_PAIRS[-1])
    cells = {line.split(" | ")[0].strip("| "): line for line in lines[2:]}
    # 4e-4 n against 1e-5 n^2: a share of 40 / n; growth as the module's.
    n_small, n_large = ANALYSIS_PAIRS[0], ANALYSIS_PAIRS[-1]
    self.assertIn(f"| {40 / n_small:.3f} (", cells[small])
    self.assertIn(f"| {40 / n_large:.3f} (", cells[large])
    growth = n_large / n_small
    self.assertTrue(cells[large].endswith(f"| {growth:.1f}x ({growth:.1f}x) |"))
    # The control: a quadratic analysis grows faster than the module.
    for r in rounds:
      for n in ANALYSIS_PAIRS:
        r[str(2 * n)]["races"] = 1e-6 * n * n
    quadratic = bench_report.analysis_table(rounds)[-1]
    self.assertFalse(quadratic.endswith(f"| {growth:.1f}x ({growth:.1f}x) |"))


class DumpCheckTableTest(absltest.TestCase):
  def test_the_checks_share_of_the_compile_time(self):
    rounds = [_dump_round(check) for check in (0.2, 0.3, 0.25)]
    header, _, row = bench_report.dump_check_table(rounds)
    self.assertIn("check / compile", header)
    self.assertIn("command / compile", header)
    # The command: the check plus a 0.5 s start.
    self.assertEqual(
      row,
      "| small programs | 300 | 200 | 10 (10…10) | 0.25 (0.2…0.3) "
      "| 0.025 (0.020…0.030) | 0.125 (0.1…0.15) | 0.75 (0.7…0.8) "
      "| 0.075 (0.070…0.080) |",
    )
    # The control: a slower check is a larger share, of both.
    slower = bench_report.dump_check_table(
      [_dump_round(check) for check in (2.0, 3.0, 2.5)]
    )[2]
    self.assertIn("| 0.250 (0.200…0.300) |", slower)
    self.assertIn("| 0.300 (0.250…0.350) |", slower)


def _results() -> dict:
  """A whole run's results, made up, in the shape the runner writes."""
  timings = _timings(ours_extra_s=1e-4)
  compile_round = {
    axis: {str(n): 0.01 * n for n in COMPILE_SIZES}
    for axis in ("payload", "witness")
  }
  counts = {key: 1 for key, _ in STRUCTURE}
  return {
    "meta": {
      "date": "2026-01-01 00:00 UTC",
      "machine": "x86_64, a CPU, 2 cores",
      "versions": "made up",
      "timing_rounds": len(JITTER),
      "compile_rounds": 3,
      "steps": SCAN_STEPS,
      "quick": False,
      "load_start": "0.1/0.1/0.1",
      "load_end": "0.1/0.1/0.1",
      "wall_min": 2.5,
    },
    "timings": timings,
    "derived": comparisons.derive(timings, SCAN_STEPS),
    "compile": {impl: [compile_round] * 3 for impl in COMPILE_IMPLS},
    "structure": {
      impl: {**counts, "custom_call_1x1": ["f32[] custom-call(%_, %_)"]}
      for impl in IMPLS
      if impl != NOISE
    },
    "handlers": {name: JITTER for name in (OURS, PEER, OURS_AGAIN)},
    "sanitizer": {
      "unsanitized": [x * 80 for x in JITTER],
      "wrapped, recording off": [x * 90 for x in JITTER],
      "wrapped, recording": [x * 170 for x in JITTER],
    },
    "analysis": [_analysis_round(factor) for factor in (1.0, 1.1, 0.9)],
    "dump_check": [_dump_round(check) for check in (0.2, 0.3, 0.25)],
  }


def _dump_round(check_s: float) -> dict[str, float]:
  """A made-up round of the dump_check part: 300 modules compiled in 10 s,
  the optimized modules alone checked in half the time, the command taking
  0.5 s more than the check."""
  return {
    "modules": 300,
    "native_modules": 200,
    "compile": 10.0,
    "check": check_s,
    "optimized_only": check_s / 2,
    "command": check_s + 0.5,
  }


def _analysis_round(factor: float) -> dict[str, dict[str, float]]:
  """A made-up round of the analysis part: steps linear in the size,
  compile quadratic."""
  return {
    str(2 * n): {
      "instructions": 5 * n,
      "compile": factor * 1e-5 * n * n,
      "parse": factor * 2e-4 * n,
      "races": factor * 1e-4 * n,
      "graph": factor * 1e-4 * n,
    }
    for n in ANALYSIS_PAIRS
  }


def _skeleton(report: str) -> list[str]:
  """What a report keeps from run to run: table headers, each row's first
  cell and width, and the prose lines without numbers."""
  kept = []
  lines = report.splitlines()
  for i, line in enumerate(lines):
    if not line.startswith("|"):
      if not re.search(r"\d", line):
        kept.append(line)
      continue
    is_header = i + 1 < len(lines) and lines[i + 1].startswith("|---")
    cells = line.strip("|").split(" | ")
    kept.append(line if is_header else f"{cells[0]} ({len(cells)} cells)")
  return kept


def _page_block(marker: str) -> str:
  """What docs/performance.md holds between `marker`'s begin and end."""
  page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
  begin, end = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
  return page[page.index(begin) + len(begin) : page.index(end)]


class PerformancePageTablesTest(absltest.TestCase):
  def assert_page_block(self, marker: str, made: str, rerun: str) -> None:
    """docs/performance.md's `marker` block has the rows, columns and
    prose lines of `made`, a report made now; a report with a row less
    does not pass for it (the control)."""
    recorded = _page_block(marker)
    self.assertEqual(
      _skeleton(recorded),
      _skeleton(made),
      f"docs/performance.md's {marker} block does not have the rows and "
      f"columns the benchmark's report makes now: {rerun} and paste its "
      f"report between the {marker} markers",
    )
    self.assertNotEqual(_skeleton(recorded), _skeleton(_without_a_row(made)))

  def test_page_tables_are_what_the_report_makes(self):
    made = bench_report.markdown(_results())
    self.assert_page_block(
      "bench-results", made, "rerun `python -m benchmarks` (results.md)"
    )

  def test_program_order_block_is_what_the_report_makes(self):
    made = bench_report.program_order_markdown(_program_order_results())
    self.assert_page_block(
      "bench-program-order",
      made,
      "rerun `python -m benchmarks --only-program-order` (program_order.md)",
    )


def _program_order(ordered_extra_ns: float) -> dict:
  """A made-up run of the program_order part: both Resource copies alike,
  in_program_order slower by a fixed amount; every round's jitter shared."""
  ns = {
    PO_RESOURCE: [500.0 * f for f in JITTER],
    PO_ORDERED: [500.0 * f + ordered_extra_ns for f in JITTER],
    PO_RESOURCE_AGAIN: [501.0 * f for f in JITTER],
  }
  entangles = {PO_RESOURCE: 1, PO_ORDERED: 1, PO_RESOURCE_AGAIN: 1}
  return {"ns": ns, "loop_entangles": entangles, "steps": 10_000}


def _program_order_results(ordered_extra_ns: float = 0.0) -> dict:
  meta = dict(_results()["meta"])
  for key in ("timing_rounds", "compile_rounds", "steps"):
    del meta[key]
  return {"meta": meta, "program_order": _program_order(ordered_extra_ns)}


class ProgramOrderReportTest(absltest.TestCase):
  def test_parity_and_a_real_difference(self):
    same = bench_report.program_order_lines(_program_order(0.0))[-1]
    self.assertIn("in_program_order over Resource: 1.00x", same)
    self.assertTrue(same.endswith(": parity within noise."), same)
    # The control: 100 ns a step more, far above Resource against itself.
    slower = bench_report.program_order_lines(_program_order(100.0))[-1]
    self.assertTrue(slower.endswith(": in_program_order higher."), slower)


class ProgramOrderCompileTest(absltest.TestCase):
  """``python -m benchmarks.program_order_compile`` on small programs: each
  program runs plain and ordered, and the ordered module holds the entangle
  calls the transform adds (never a timed assertion)."""

  def test_a_small_run_and_its_table(self):
    import jax

    # The klujax program switches 64-bit types on for the process (klujax
    # needs them); the tests after this one must start as it found them.
    x64 = jax.config.read("jax_enable_x64")
    self.addCleanup(jax.config.update, "jax_enable_x64", x64)
    found = program_order_compile.run(
      calls=20,
      rounds=2,
      log=lambda _: None,
      slots=4,
      programs=program_order_compile.PROGRAMS,
    )
    self.assertContainsSubset({"store", "traced", "reads"}, found)
    for name, runs in found.items():
      ways = {"plain", "in_program_order"}
      if name != "klujax":  # The store's programs, ordered by hand too.
        ways.add("by hand")
      self.assertEqual(set(runs), ways)
      self.assertTrue(all(len(r) == 2 for r in runs.values()))
      self.assertTrue(all(r["entangles"] == 0 for r in runs["plain"]))
    # The transform's entangles are the hand's: 10 writes on 4 slots, each
    # on a slot written before after the earlier write's read (6); on
    # traced handles, each write after the read before it (9); 19 reads
    # after one write, one entangle of the handle array.
    for name, count in (("store", 6), ("traced", 9), ("reads", 1)):
      for way in ("in_program_order", "by hand"):
        self.assertEqual(found[name][way][0]["entangles"], count, (name, way))
    if "klujax" in found:  # Every solve after the one before.
      self.assertEqual(found["klujax"]["in_program_order"][0]["entangles"], 19)
    table = program_order_compile.summary(found, calls=20)
    self.assertLen(table, 2 + len(found))
    self.assertTrue(table[2].startswith("| store | 20 |"), table)
    curve = program_order_compile.summary({20: found, 40: found})
    self.assertLen(curve, 2 + 2 * len(found))
    # Traced and lowered only: the same counts, read from the lowered
    # module.
    lowered = program_order_compile.run(
      calls=20,
      rounds=1,
      log=lambda _: None,
      slots=4,
      programs=("traced",),
      compile=False,
    )
    self.assertEqual(lowered["traced"]["in_program_order"][0]["entangles"], 9)
    self.assertNotIn("wall_compile", lowered["traced"]["plain"][0])


def _without_a_row(report: str) -> str:
  lines = report.splitlines(keepends=True)
  first_row = next(i for i, line in enumerate(lines) if line.startswith("|---"))
  return "".join(lines[: first_row + 1] + lines[first_row + 2 :])


class SuiteCostTest(absltest.TestCase):
  """The parts of ``python -m benchmarks.suite_cost`` that need no suite."""

  def test_outcomes_are_read_from_pytests_last_summary_line(self):
    output = (
      "FAILED tests.py::test_a - TypeError: in x\n"
      "Checked 623 modules (97 with native calls): 0 with races, 0 pairs.\n"
      "13 failed, 61 passed, 1 error, 2 errors, 39 warnings in 35.59s\n"
    )
    self.assertEqual(
      suite_cost.outcomes(output), {"failed": 13, "passed": 61, "errors": 3}
    )
    self.assertEqual(suite_cost.outcomes("no tests ran in 0.01s"), {})

  def test_only_the_checked_run_switches_the_check_on(self):
    plain = suite_cost.command("py", ["t.py"], 2, checked=False)
    checked = suite_cost.command("py", ["t.py"], 2, checked=True)
    self.assertEqual(checked, [*plain, "--entangle-races=fail"])
    self.assertIn("-n", plain)
    self.assertNotIn("--entangle-races=fail", plain)

  def test_a_row_gives_the_paired_ratios(self):
    def run(wall, cpu):
      return suite_cost.Run(wall, cpu, 1, {}, None)

    row = suite_cost.ratio_row(
      "-n 0", [run(10, 8), run(20, 8)], [run(11, 9), run(24, 10)]
    )
    # Wall ratios 1.1 and 1.2 (median 1.15), CPU 1.125 and 1.25.
    self.assertIn("**1.15x**", row)
    self.assertIn("| 1.19x (", row)


if __name__ == "__main__":
  absltest.main()
