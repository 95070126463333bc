"""Ordering native calls: the alternatives, measured in one run.

A binding author whose read must run before the next write has several
tools: none, ``optimization_barrier``, JAX's experimental ``control_dep``
and ``program_order``, ``io_callback(ordered=True)``, a token threaded by
hand, `entangle`, `Resource`, or `in_program_order` over the unordered
program. This command measures all of them in
one run, on the jax installed (`benchmarks.orderings`):

* wrong reads of a wide program that XLA:CPU runs concurrently, and of a
  small one that it runs in schedule order (`benchmarks.hazard_runs`);
* what ``entangle_jax.testing`` says of each compiled module: whether
  every read happens before its second write, and how many races;
* whether ``vmap`` and ``jax.export`` take it
  (`benchmarks.ordering_transforms`);
* what one ordered step costs inside a long scan, against the unordered
  step, with the noise of the same run (`benchmarks.ordering_cost`).

``python -m benchmarks.alternatives [--runs N] [--markdown] [--quick]``
prints the table (``--markdown``: the table of docs/alternatives.md) and
then checks the claims the page makes (`violations`), exiting 1 when
one fails, so that CI, which runs it on every jax it tests
(tests/repository/alternatives_test.py), catches a regression: a row
that must order and does not, a control that stopped failing (then a zero
elsewhere proves nothing), or an analysis verdict that the run contradicts.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import textwrap

import jax

from benchmarks import (
  hazard_runs,
  ordering_cost,
  ordering_transforms,
  orderings,
)
from benchmarks.hazard_runs import Runs
from benchmarks.ordering_cost import Costs
from benchmarks.orderings import Ordering

MUST_ORDER = (
  orderings.CALLBACK,
  orderings.THREADED,
  orderings.ENTANGLE,
  orderings.RESOURCE,
  orderings.IN_PROGRAM_ORDER,
)
"""Rows that order every read before its write: no wrong read, anywhere,
and the analysis agrees."""
MUST_FAIL = (
  orderings.NONE,
  orderings.BARRIER,
  orderings.CONTROL_DEP,
  orderings.PROGRAM_ORDER,
  orderings.CALLBACK_UNORDERED,
)
"""Rows that order nothing XLA:CPU's concurrent runtime honours: wrong
reads on the wide program, wherever the installed jax has them. They are
the controls: without their wrong reads, the zeros of `MUST_ORDER` would
prove nothing."""
MUST_TRANSFORM = (
  orderings.THREADED,
  orderings.ENTANGLE,
  orderings.RESOURCE,
  orderings.IN_PROGRAM_ORDER,
)
"""Rows that work under ``vmap`` and ``jax.export``."""
REFUSES_TRANSFORMS = (orderings.CALLBACK,)
"""Rows that ``vmap`` and serialization refuse (ordered host callbacks)."""
RUNS = 20


@dataclasses.dataclass(frozen=True)
class Row:
  """One ordering's measurements; all None when this jax lacks it."""

  ordering: Ordering
  missing: str | None
  wide: Runs | None = None
  small: Runs | None = None
  vmap_refusal: str | None = None
  export_refusal: str | None = None


@dataclasses.dataclass(frozen=True)
class Results:
  rows: list[Row]
  costs: Costs
  runs: int


def measure(runs: int = RUNS, quick: bool = False) -> Results:
  """Runs every ordering the installed jax has; see the module docstring."""
  rows = []
  for ordering in orderings.ORDERINGS:
    missing = ordering.missing()
    if missing is not None:
      rows.append(Row(ordering, missing))
      continue
    rows.append(
      Row(
        ordering,
        None,
        hazard_runs.wide(ordering, runs),
        hazard_runs.small(ordering, runs),
        ordering_transforms.vmap_refusal(ordering),
        ordering_transforms.export_refusal(ordering),
      )
    )
  present = [row.ordering for row in rows if row.missing is None]
  costs = ordering_cost.measure(
    present,
    baseline=next(o for o in present if o.key == orderings.NONE),
    steps=ordering_cost.QUICK_STEPS if quick else ordering_cost.STEPS,
    rounds=ordering_cost.QUICK_ROUNDS if quick else ordering_cost.ROUNDS,
  )
  return Results(rows, costs, runs)


def violations(results: Results) -> list[str]:
  """The claims of docs/alternatives.md that this run contradicts."""
  found = []
  for row in results.rows:
    if row.missing is None:
      found += _contradictions(row)
  return found


def _contradictions(row: Row) -> list[str]:
  assert row.wide is not None and row.small is not None
  label, key = row.ordering.label, row.ordering.key
  found = []
  for name, runs in (("wide", row.wide), ("small", row.small)):
    verdict = (
      f"read -> second write {'ordered' if runs.ordered else 'not ordered'}"
      f", {runs.races} races"
    )
    if runs.wrong and (runs.ordered or not runs.races):
      found.append(
        f"{label}: {runs.wrong} wrong reads on the {name} program, yet the "
        f"analysis finds it ordered ({verdict})"
      )
    if key in MUST_ORDER and (runs.wrong or not runs.ordered):
      found.append(
        f"{label}: must order every read, but the {name} program read "
        f"{runs.wrong} of {runs.reads} wrong ({verdict})"
      )
    if key in MUST_FAIL and runs.ordered:
      found.append(f"{label}: the analysis finds the {name} program ordered")
  if key in MUST_FAIL and not row.wide.wrong:
    found.append(
      f"{label}: no wrong read in {row.wide.reads} on the wide program; "
      "the control no longer shows the hazard, so the zeros prove nothing "
      "(raise --runs or hazard_runs.DELAY_US)"
    )
  for name, refusal in (
    ("vmap", row.vmap_refusal),
    ("export", row.export_refusal),
  ):
    if key in MUST_TRANSFORM and refusal is not None:
      found.append(f"{label}: {name} refused it: {refusal}")
    if key in REFUSES_TRANSFORMS and refusal is None:
      found.append(f"{label}: {name} no longer refuses it")
  return found


def machine() -> str:
  """Which jax and machine made the numbers."""
  device = jax.devices()[0].platform
  return (
    f"jax {jax.__version__}, {device}, {os.cpu_count()} cores "
    f"({platform.machine()}), Python {platform.python_version()}"
  )


HEADER = (
  "ordering",
  "wide: wrong",
  "wide: ms/run",
  "small: wrong",
  "read -> write",
  "races",
  "vmap",
  "export",
  "ns/step",
  "x unordered",
)
"""The table's columns: wrong reads of all runs, the median run's time;
whether every read happens before its hazard's second write, and how many
races, in the wide program's module; vmap and export; the cost of a step
and its ratio to the unordered step."""


def cells(row: Row, costs: Costs) -> tuple[str, ...]:
  if row.missing is not None:
    return (row.ordering.label, row.missing, *[""] * (len(HEADER) - 2))
  assert row.wide is not None and row.small is not None
  cost = costs.by_key[row.ordering.key]
  return (
    row.ordering.label,
    f"{row.wide.wrong} / {row.wide.reads}",
    f"{row.wide.seconds * 1e3:.1f}",
    f"{row.small.wrong} / {row.small.reads}",
    "ordered" if row.wide.ordered else "not ordered",
    str(row.wide.races),
    "yes" if row.vmap_refusal is None else "no",
    "yes" if row.export_refusal is None else "no",
    f"{cost.ns_per_step:,.0f}",
    f"{cost.ratio:.2f}",
  )


def caption(results: Results) -> str:
  costs = results.costs
  return textwrap.fill(
    f"{machine()}. Wrong reads: {results.runs} runs of each program, reads "
    f"delayed {hazard_runs.DELAY_US} us; the wide program holds "
    f"{hazard_runs.HAZARDS} hazards. Cost: a scan of {costs.steps:,} steps "
    f"({ordering_cost.CALLBACK_SHARE:.0%} of them for callbacks), median of "
    f"{costs.rounds} rounds; two copies of the no-ordering program came "
    f"within {costs.noise:.1%} of each other, so smaller differences are "
    f"noise.",
    width=80,
  )


def aligned(rows: list[tuple[str, ...]], markdown: bool) -> str:
  """The rows as columns padded to one width: a Markdown pipe table (that
  reads as well unrendered), or plain columns with a rule under the
  header."""
  widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
  rule = tuple("-" * w for w in widths)
  lines = []
  for row in [rows[0], rule, *rows[1:]]:
    padded = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
    line = "| " + " | ".join(padded) + " |" if markdown else "  ".join(padded)
    lines.append(line.rstrip())
  return "\n".join(lines)


def table(results: Results, markdown: bool = False) -> str:
  """The caption and the table: Markdown, or plain columns."""
  rows = [HEADER, *(cells(row, results.costs) for row in results.rows)]
  return f"{caption(results)}\n\n{aligned(rows, markdown)}\n"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog="python -m benchmarks.alternatives",
    description=__doc__.splitlines()[0],
  )
  parser.add_argument(
    "--runs",
    type=int,
    default=RUNS,
    help=f"runs of each program (default {RUNS})",
  )
  parser.add_argument(
    "--markdown",
    action="store_true",
    help="print the table of docs/alternatives.md",
  )
  parser.add_argument(
    "--quick",
    action="store_true",
    help="time shorter scans in fewer rounds (for CI; the runs stay)",
  )
  args = parser.parse_args(argv)
  if args.runs < 1:
    parser.error("--runs must be at least 1")
  results = measure(args.runs, args.quick)
  print(table(results, args.markdown), end="")
  found = violations(results)
  for violation in found:
    print(f"violated: {violation}", file=sys.stderr)
  return 1 if found else 0


if __name__ == "__main__":
  sys.exit(main())
