"""docs/alternatives.md's claims, measured on the installed jax.

Runs ``python -m benchmarks.alternatives --quick``'s measurements once, in
this process, and checks what the page says of each way to order a read
before the next write: the ones that order read nothing wrong on the wide
program and the analysis says so; the controls (no ordering, the barrier,
JAX's experimental orderings, unordered callbacks) read wrong there, so
the zeros mean something; the analysis never calls ordered a program
that read wrong. CI runs the suite on every jax it tests, so this is the
command's run there. The checker itself gets its control too: made-up
results that break each claim must be caught, and fail the command.
"""

import contextlib
import dataclasses
import io
import os
import subprocess
import sys
import unittest
from unittest import mock

from absl.testing import absltest

from tests import test_util

try:
  from benchmarks import alternatives, orderings
  from benchmarks.hazard_runs import Runs
  from benchmarks.ordering_cost import Cost, Costs
except ModuleNotFoundError as missing:
  if missing.name != "benchmarks":
    raise
  # CI also runs a copy of tests/ against the installed package, away from
  # the checkout: the benchmark is not there to test.
  raise unittest.SkipTest(
    "no benchmarks/ package: tests/ runs from a copy outside the checkout"
  ) from missing

# Which of JAX's experimental orderings each jax CI tests has (the rest are
# in every supported jax).
EXPERIMENTAL = {orderings.CONTROL_DEP, orderings.PROGRAM_ORDER}
PRESENT_IN = {
  (0, 6): set(),
  (0, 10): {orderings.CONTROL_DEP},
  (0, 12): {orderings.PROGRAM_ORDER},
}
# Whether XLA with fast math folds the hand-threaded token's ``x * 0`` away,
# by the jax CI tests.
FAST_MATH_FOLDS = {(0, 6): False, (0, 10): True, (0, 12): True}
_THREADED_UNDER_FAST_MATH = """
from benchmarks import hazard_runs, orderings
threaded = next(o for o in orderings.ORDERINGS if o.key == orderings.THREADED)
runs = hazard_runs.wide(threaded, 20)
print(runs.wrong, runs.ordered)
"""


class AlternativesTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.results = alternatives.measure(quick=True)
    cls.rows = {row.ordering.key: row for row in cls.results.rows}

  def present(self, keys):
    return [self.rows[k] for k in keys if self.rows[k].missing is None]

  def test_the_command_finds_no_violation(self):
    self.assertEqual(alternatives.violations(self.results), [])

  def test_the_rows_this_jax_has(self):
    present = {k for k, row in self.rows.items() if row.missing is None}
    self.assertEqual(present - EXPERIMENTAL, set(self.rows) - EXPERIMENTAL)
    expected = PRESENT_IN.get(test_util.jax_version()[:2])
    if expected is None:
      self.skipTest(f"no record of jax {test_util.jax_version()}'s rows")
    self.assertEqual(present & EXPERIMENTAL, expected)
    for key in EXPERIMENTAL - expected:
      self.assertRegex(str(self.rows[key].missing), r"^not in jax \d")

  def test_orderings_read_nothing_wrong_on_the_wide_program(self):
    for row in self.present(alternatives.MUST_ORDER):
      with self.subTest(row.ordering.label):
        self.assertEqual(row.wide.wrong, 0)
        self.assertTrue(row.wide.ordered)

  def test_controls_read_wrong_on_the_wide_program(self):
    # The control of every zero above: the same hazards, unordered.
    controls = self.present(alternatives.MUST_FAIL)
    self.assertGreaterEqual(len(controls), 3)  # none, barrier, callbacks
    for row in controls:
      with self.subTest(row.ordering.label):
        self.assertGreater(row.wide.wrong, 0)
        self.assertFalse(row.wide.ordered)

  def test_the_analysis_never_calls_a_wrong_program_ordered(self):
    for row in self.present(self.rows):
      for runs in (row.wide, row.small):
        with self.subTest(row.ordering.label):
          if runs.wrong:
            self.assertFalse(runs.ordered)
            self.assertGreater(runs.races, 0)

  def test_a_small_program_reads_right_without_order(self):
    # Why the wide program: XLA:CPU runs the small one in schedule order,
    # and there some unordered rows read nothing wrong.
    lucky = [
      row.ordering.label
      for row in self.present(alternatives.MUST_FAIL)
      if row.small.wrong == 0 and not row.small.ordered and row.wide.wrong
    ]
    self.assertNotEmpty(lucky)

  def test_ordered_callbacks_refuse_vmap_and_export(self):
    row = self.rows[orderings.CALLBACK]
    self.assertIsNotNone(row.vmap_refusal)
    self.assertIsNotNone(row.export_refusal)
    self.assertIsNone(self.rows[orderings.ENTANGLE].vmap_refusal)
    self.assertIsNone(self.rows[orderings.ENTANGLE].export_refusal)

  def test_a_hand_threaded_token_is_xlas_to_remove(self):
    # x * 0 is no identity for NaN, unless fast math says there is none.
    flags = os.environ.get("XLA_FLAGS", "")
    env = test_util.child_env()
    env["XLA_FLAGS"] = f"{flags} --xla_cpu_enable_fast_math=true".strip()
    child = subprocess.run(
      [sys.executable, "-c", _THREADED_UNDER_FAST_MATH],
      capture_output=True,
      text=True,
      timeout=50,
      env=env,
      check=False,
    )
    self.assertEqual(child.returncode, 0, child.stderr[-2000:])
    wrong, ordered = child.stdout.split()
    wrong, ordered = int(wrong), ordered == "True"
    if wrong:  # The analysis agrees with the run, whatever XLA did.
      self.assertFalse(ordered)
    folds = FAST_MATH_FOLDS.get(test_util.jax_version()[:2])
    if folds is not None:
      # Folded, the token orders nothing and the run shows it; kept, the
      # token still orders every read.
      self.assertEqual((wrong > 0, ordered), (folds, not folds))

  def test_the_table_has_a_row_per_ordering(self):
    table = alternatives.table(self.results, markdown=True)
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    cells = [[cell.strip() for cell in line.split("|")[1:]] for line in lines]
    self.assertEqual(cells[0][0], alternatives.HEADER[0])
    by_label = {row[0]: row for row in cells[2:]}  # after the rule
    self.assertEqual(
      list(by_label), [ordering.label for ordering in orderings.ORDERINGS]
    )
    for row in self.rows.values():
      if row.missing is not None:
        self.assertEqual(by_label[row.ordering.label][1], row.missing)


class ViolationsTest(absltest.TestCase):
  """The checker's control: made-up results that break a claim."""

  def setUp(self):
    super().setUp()
    self.good = {
      key: Runs(wrong=0, reads=240, ordered=True, races=0, seconds=0.01)
      for key in alternatives.MUST_ORDER
    }
    self.good |= {
      key: Runs(wrong=30, reads=240, ordered=False, races=12, seconds=0.01)
      for key in alternatives.MUST_FAIL
    }

  def results(self, **changed: Runs):
    runs = self.good | changed
    rows = []
    for ordering in orderings.ORDERINGS:
      refusal = "refused" if ordering.key == orderings.CALLBACK else None
      rows.append(
        alternatives.Row(
          ordering,
          None,
          runs[ordering.key],
          runs[ordering.key],
          refusal,
          refusal,
        )
      )
    cost = Cost(ns_per_step=500.0, ratio=1.0, low=1.0, high=1.0)
    costs = Costs({key: cost for key in runs}, noise=0.01, steps=1, rounds=2)
    return alternatives.Results(rows, costs, runs=20)

  def test_made_up_good_results_pass(self):
    self.assertEqual(alternatives.violations(self.results()), [])

  def test_each_broken_claim_is_caught(self):
    entangle = self.good[orderings.ENTANGLE]
    barrier = self.good[orderings.BARRIER]
    broken = {
      "a wrong read where entangle orders": {
        orderings.ENTANGLE: dataclasses.replace(entangle, wrong=1)
      },
      "a control without a wrong read": {
        orderings.BARRIER: dataclasses.replace(barrier, wrong=0)
      },
      "an analysis that calls a wrong program ordered": {
        orderings.BARRIER: dataclasses.replace(barrier, ordered=True)
      },
      "an analysis that finds no race in a wrong program": {
        orderings.NONE: dataclasses.replace(barrier, races=0)
      },
    }
    for what, changed in broken.items():
      with self.subTest(what):
        self.assertNotEmpty(alternatives.violations(self.results(**changed)))

  def test_a_violation_fails_the_command(self):
    wrong = dataclasses.replace(self.good[orderings.RESOURCE], wrong=2)
    bad = self.results(**{orderings.RESOURCE: wrong})
    err = io.StringIO()
    with (
      mock.patch.object(alternatives, "measure", return_value=bad),
      contextlib.redirect_stdout(io.StringIO()),
      contextlib.redirect_stderr(err),
    ):
      self.assertEqual(alternatives.main(["--quick"]), 1)
    self.assertIn("violated: Resource", err.getvalue())


if __name__ == "__main__":
  absltest.main()
