"""The README-ready Markdown report of one run.

Every timed number is reported as its median over rounds with its
interquartile range (IQR) and compared, round by round, against the other
implementations and against the identity-vs-identity noise floor of the
same run. The report is a sequence of sections (`SECTIONS`), each made from
the run's results and separated by a blank line.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from benchmarks import stats
from benchmarks.cases import (
  BARRIER,
  BASELINE,
  COMPILE_IMPLS,
  IMPLS,
  METRICS,
  NOISE,
  OURS,
  OURS_AGAIN,
  PEER,
  PO_ORDERED,
  PO_RESOURCE,
  PO_RESOURCE_AGAIN,
  STRUCTURE,
)
from benchmarks.comparisons import comparisons


def number(value: float, kind: str) -> str:
  """``value`` of a metric of ``kind`` ("diff" or "ratio"), as printed."""
  if kind == "diff" and abs(value) < 0.05:
    return "0.0"  # not "-0.0"
  if kind == "diff":
    return f"{value:.0f}" if abs(value) >= 9.5 else f"{value:.1f}"
  if value >= 100:
    return f"{value:.0f}x"
  return f"{value:.2f}x"


def _cell(values: list[float], kind: str) -> str:
  s = stats.spread(values)
  return (
    f"{number(s.median, kind)} "
    f"({number(s.q1, kind).rstrip('x')}…{number(s.q3, kind)})"
  )


def _conclusion(verdict: stats.Verdict) -> str:
  if verdict.conclusion == stats.PARITY:
    return stats.PARITY
  return f"entangle-jax {verdict.conclusion}"


def _sig(value: float) -> str:
  # Two decimals, or three significant digits for ratios far below 1.
  return f"{value:.2f}" if abs(value) >= 0.1 else f"{value:.3g}"


def _row(first: str, cells: Sequence[str]) -> str:
  return f"| {first} | " + " | ".join(cells) + " |"


def _rule(columns: int) -> str:
  return "|---" * columns + "|"


def timing_table(derived: dict) -> list[str]:
  lines = [_row("implementation", [m.header for m in METRICS])]
  lines.append(_rule(len(METRICS) + 1))
  for impl in IMPLS:
    if impl == BASELINE:
      cells = [
        "0 (baseline)" if m.kind == "diff" else "1x (baseline)" for m in METRICS
      ]
    else:
      cells = [_cell(derived[impl][m.key], m.kind) for m in METRICS]
    name = "identity vs identity (noise floor)" if impl == NOISE else impl
    lines.append(_row(name, cells))
  return lines


def comparison_table(found: list[dict]) -> list[str]:
  lines = [
    "| metric | entangle-jax vs | difference, median (95% CI) | ratio, "
    "median (95% CI) | noise threshold | conclusion |",
    _rule(6),
  ]
  for row in found:
    metric, verdict = row["metric"], row["verdict"]
    big = abs(row["verdict"].median_difference) >= 100
    digits = 0 if metric.kind == "diff" or big else 2
    lo, hi = verdict.ci
    difference = (
      f"{verdict.median_difference:+.{digits}f} "
      f"({lo:+.{digits}f}…{hi:+.{digits}f})"
    )
    if row["ratio"] is None:
      ratio = "—"
    else:
      median, (rlo, rhi) = row["ratio"]
      ratio = f"{_sig(median)}x ({_sig(rlo)}…{_sig(rhi)})"
    threshold = f"±{verdict.threshold:.{digits}f} ({row['relative_noise']:.1%})"
    cells = [row["other"], difference, ratio, threshold, _conclusion(verdict)]
    lines.append(_row(metric.header, cells))
  return lines


def compile_table(compiles: dict[str, list[dict]]) -> list[str]:
  sizes = list(compiles[OURS][0]["payload"])
  headers = [f"{impl}, s" for impl in COMPILE_IMPLS]
  lines = [
    _row("leaves", ["axis", *headers, f"{OURS} / {BARRIER}"]),
    _rule(len(COMPILE_IMPLS) + 3),
  ]
  for axis in ("payload", "witness"):
    for n in sizes:
      cells = [axis]
      for impl in COMPILE_IMPLS:
        s = stats.spread([r[axis][n] for r in compiles[impl]])
        cells.append(f"{s.median:.3g} ({s.low:.3g}…{s.high:.3g})")
      ratio = stats.spread(
        stats.ratios(
          [r[axis][n] for r in compiles[OURS]],
          [r[axis][n] for r in compiles[BARRIER]],
        )
      )
      cells.append(f"{ratio.median:.2f}x ({ratio.low:.2f}…{ratio.high:.2f})")
      lines.append(_row(n, cells))
  return lines


def analysis_table(rounds: list[dict[str, dict[str, float]]]) -> list[str]:
  """Analysis times against XLA's compile time, per program size."""
  sizes = list(rounds[0])
  steps = ("compile", "parse", "races", "graph")
  headers = ["XLA compile, s", "parse, s", "races, s", "order_graph, s"]
  lines = [
    _row(
      "native calls",
      ["instructions", *headers, "analysis / compile", "growth (instructions)"],
    ),
    _rule(8),
  ]
  total = {
    n: [r[n]["parse"] + r[n]["races"] + r[n]["graph"] for r in rounds]
    for n in sizes
  }
  for n in sizes:
    cells = [f"{rounds[0][n]['instructions']:.0f}"]
    for step in steps:
      s = stats.spread([r[n][step] for r in rounds])
      cells.append(f"{s.median:.3g} ({s.low:.3g}…{s.high:.3g})")
    ratio = stats.spread(
      stats.ratios(total[n], [r[n]["compile"] for r in rounds])
    )
    cells.append(f"{ratio.median:.3f} ({ratio.low:.3f}…{ratio.high:.3f})")
    growth = statistics.median(total[n]) / statistics.median(total[sizes[0]])
    size = rounds[0][n]["instructions"] / rounds[0][sizes[0]]["instructions"]
    cells.append(f"{growth:.1f}x ({size:.1f}x)")
    lines.append(_row(n, cells))
  return lines


def dump_check_table(rounds: list[dict[str, float]]) -> list[str]:
  """The race check over a dump against XLA's compile time of its
  modules: the check's work in the process, and the whole command in a
  fresh interpreter, each as a share of the compile time."""
  lines = [
    _row(
      "suite",
      [
        "modules in the dump",
        "with native calls",
        "XLA compile (all), s",
        "check (all), s",
        "check / compile",
        "optimized module only, s",
        "command, s",
        "command / compile",
      ],
    ),
    _rule(9),
  ]
  cells = [f"{rounds[0]['modules']:.0f}", f"{rounds[0]['native_modules']:.0f}"]
  compile_s = [r["compile"] for r in rounds]
  for step in ("compile", "check", "optimized_only", "command"):
    s = stats.spread([r[step] for r in rounds])
    cells.append(f"{s.median:.3g} ({s.low:.3g}…{s.high:.3g})")
    if step in ("check", "command"):
      ratio = stats.spread(stats.ratios([r[step] for r in rounds], compile_s))
      cells.append(f"{ratio.median:.3f} ({ratio.low:.3f}…{ratio.high:.3f})")
  lines.append(_row("small programs", cells))
  return lines


def handler_lines(handlers: dict[str, list[float]]) -> list[str]:
  """This checkout's handler against the peer's, behind identical calls."""
  ours, peer = handlers[OURS], handlers[PEER]
  noise = stats.relative_noise(handlers[OURS_AGAIN], ours)
  verdict = stats.compare(
    stats.paired(ours, peer), noise * statistics.median(peer)
  )
  lines = [
    "| handler behind the same custom call | ns a scan step, median (IQR) |",
    _rule(2),
  ]
  for name, values in handlers.items():
    s = stats.spread(values)
    lines.append(_row(name, [f"{s.median:.0f} ({s.q1:.0f}…{s.q3:.0f})"]))
  lo, hi = verdict.ci
  lines += [
    "",
    f"This checkout's handler minus the peer's: "
    f"{verdict.median_difference:+.0f} ns a call (95% CI {lo:+.0f}…{hi:+.0f}; "
    f"noise threshold ±{verdict.threshold:.0f}, from this checkout's handler "
    f"against itself, {noise:.1%}): {_conclusion(verdict)}.",
  ]
  return lines


def program_order_lines(found: dict) -> list[str]:
  """The hazard scan under in_program_order against Resource, in one
  process: each program's ns a step and loop-body entangle calls, then
  the ratio, paired round by round, with its verdict."""
  ns = found["ns"]
  ordered, resource = ns[PO_ORDERED], ns[PO_RESOURCE]
  noise = stats.relative_noise(ns[PO_RESOURCE_AGAIN], resource)
  verdict = stats.compare(
    stats.paired(ordered, resource), noise * statistics.median(resource)
  )
  per_round = stats.ratios(ordered, resource)
  rlo, rhi = stats.bootstrap_ci(per_round)
  lines = [
    "| program | ns a scan step, median (IQR) | entangle calls in the loop "
    "body |",
    _rule(3),
  ]
  for name, values in ns.items():
    s = stats.spread(values)
    cells = [
      f"{s.median:.0f} ({s.q1:.0f}…{s.q3:.0f})",
      str(found["loop_entangles"][name]),
    ]
    lines.append(_row(name, cells))
  lo, hi = verdict.ci
  conclusion = (
    stats.PARITY
    if verdict.conclusion == stats.PARITY
    else f"in_program_order {verdict.conclusion}"
  )
  lines += [
    "",
    f"in_program_order over Resource: {statistics.median(per_round):.2f}x "
    f"(95% CI {rlo:.2f}…{rhi:.2f}), {verdict.median_difference:+.0f} ns a "
    f"step (95% CI {lo:+.0f}…{hi:+.0f}; noise threshold "
    f"±{verdict.threshold:.0f}, from Resource against itself, {noise:.1%}): "
    f"{conclusion}.",
  ]
  return lines


def structure_table(structure: dict[str, dict]) -> list[str]:
  impls = [i for i in IMPLS if i in structure]
  lines = [_row("compiled HLO", impls), _rule(len(impls) + 1)]
  for key, label in STRUCTURE:
    lines.append(_row(label, [str(structure[i][key]) for i in impls]))
  return lines


# --- sections: prose, then what it describes --------------------------------


def summary_section(results: dict) -> list[str]:
  meta = results["meta"]
  return [
    f"{meta['date']}; {meta['machine']}; {meta['versions']}; "
    f"{meta['timing_rounds']} alternating rounds of timing, "
    f"{meta['compile_rounds']} of compilation; scans of {meta['steps']} "
    f"steps; load average {meta['load_start']} at the start, "
    f"{meta['load_end']} at the end; the run took {meta['wall_min']:.1f} min"
    f"{' (--quick)' if meta['quick'] else ''}."
  ]


_TIMING_PROSE = """\
Cost over a plain identity, median over rounds (interquartile range).
A round's value is the fastest of repeated calls in its subprocess
(the call least disturbed by other load); the spread is over rounds:"""

_COMPARISON_PROSE = """\
entangle-jax against the others, paired round by round (differences in
ns for the scans, in multiples of identity's time for the programs). A
difference counts when its 95% bootstrap interval excludes zero and it
exceeds the noise threshold: how far from zero the median gap between
identity and identity could lie in this run (the far end of its 95%
bootstrap interval, relative, in parentheses), times the compared
program's whole time. Otherwise it is parity within noise:"""

_COMPILE_PROSE = """\
Trace + lower + compile time of one call with n payload leaves (1
witness) or n witness leaves (1 payload leaf), median (min…max) over
rounds:"""


_ANALYSIS_PROSE = """\
The order analysis (`entangle_jax.testing`) of a compiled program of n
`Resource` writes, each followed by a read (2n native calls), against
the time XLA took to compile it (`Lowered.compile()`): parsing
(`OrderAnalysis(compiled)`), `races()` and `order_graph(compiled)`, each
as a user calls it; median (min…max) over rounds. The analysis's share of
the compile time, and its growth from the smallest program (the module's
growth in parentheses):"""


_DUMP_CHECK_PROSE = """\
The race check over an XLA dump against the time XLA took to compile
those modules with the dump on, for a suite of small programs (a third
without native calls, the rest with 1 to 8 `Resource` write + read
pairs): the check's work in the process (finding the modules, reading
the declarations, checking each against its module before optimization),
the same with the optimized modules alone (the baseline of the same run:
what the check cost before it compared the program's order), and the
whole command as a user runs it (`python -m entangle_jax.testing DIR` in
a fresh interpreter, its start-up included); median (min…max) over
rounds:"""


def analysis_section(results: dict) -> list[str]:
  lines = [_ANALYSIS_PROSE, "", *analysis_table(results["analysis"])]
  if "dump_check" in results:
    lines += [
      "",
      _DUMP_CHECK_PROSE,
      "",
      *dump_check_table(results["dump_check"]),
    ]
  return lines


def timing_section(results: dict) -> list[str]:
  return [_TIMING_PROSE, "", *timing_table(results["derived"])]


def comparison_section(results: dict) -> list[str]:
  found = comparisons(results["timings"], results["derived"])
  return [_COMPARISON_PROSE, "", *comparison_table(found)]


def compile_section(results: dict) -> list[str]:
  return [_COMPILE_PROSE, "", *compile_table(results["compile"])]


def structure_section(results: dict) -> list[str]:
  return structure_table(results["structure"])


def handler_section(results: dict) -> list[str]:
  return [
    "Both handlers in one process, each behind a `jax.ffi.ffi_call` with",
    "the same operands, aliasing and API version (so only the handler",
    "differs), alternated over "
    f"{len(results['handlers'][OURS])} rounds of a 1x1 scan:",
    "",
    *handler_lines(results["handlers"]),
  ]


SANITIZER_BOUND_NS = 200
"""What recording may add to a native call on CPU (issue 53)."""


def sanitizer_lines(found: dict[str, list[float]]) -> list[str]:
  """A native call unsanitized, through the sanitizer's trampoline with
  recording off, and recording; and what recording adds."""
  lines = [
    "| one no-op FFI call a scan step | ns a call, median (IQR) |",
    _rule(2),
  ]
  for name, values in found.items():
    s = stats.spread(values)
    lines.append(_row(name, [f"{s.median:.0f} ({s.q1:.0f}…{s.q3:.0f})"]))
  names = list(found)
  first, last = found[names[0]], found[names[-1]]
  added = [r - p for p, r in zip(first, last, strict=True)]
  median = statistics.median(added)
  verdict = "within" if median <= SANITIZER_BOUND_NS else "over"
  lines += [
    "",
    f"Recording adds {median:.0f} ns a call (median of the rounds' "
    f"differences; {verdict} the {SANITIZER_BOUND_NS} ns bound).",
  ]
  return lines


def sanitizer_section(results: dict) -> list[str]:
  if "sanitizer" not in results:
    return ["(This run did not measure the sanitizer.)"]
  return [
    "The sanitizer's cost on CPU: one no-op handler registered under two",
    "names, before and after `entangle_jax.testing.sanitize` started, each",
    "called once a step of a 10,000-step scan; the three programs",
    f"alternated over {len(next(iter(results['sanitizer'].values())))} rounds:",
    "",
    *sanitizer_lines(results["sanitizer"]),
  ]


def custom_call_section(results: dict) -> list[str]:
  calls = [
    f"{impl}: {line}"
    for impl in (OURS, PEER)
    for line in results["structure"][impl]["custom_call_1x1"]
  ]
  return [
    "The custom call each package emits in the 1x1 scan (compiled HLO, "
    "metadata and names removed):",
    "",
    "```",
    *calls,
    "```",
  ]


SECTIONS: tuple[Callable[[dict], list[str]], ...] = (
  summary_section,
  timing_section,
  comparison_section,
  compile_section,
  structure_section,
  handler_section,
  sanitizer_section,
  custom_call_section,
  analysis_section,
)


def markdown(results: dict) -> str:
  """The README-ready report of one run: its sections, in order."""
  return "\n\n".join("\n".join(make(results)) for make in SECTIONS) + "\n"


_PROGRAM_ORDER_PROSE = """\
The hazard as the step of a `lax.scan` (write, read, write; the second
write's token the next step's slot): written with `Resource`, and
unordered under `jax.jit(in_program_order(program))`. One process, the
three programs alternating round by round (`Resource` compiled and timed
twice: its noise floor); a round's value is the fastest of 3 calls.
Medians over rounds (interquartile range), and the entangle calls in each
compiled loop body:"""


def program_order_markdown(results: dict) -> str:
  """The report of the in_program_order part (``--only-program-order``,
  or ``program_order.md`` of a full run)."""
  meta = results["meta"]
  found = results["program_order"]
  quick = " (--quick)" if meta["quick"] else ""
  rounds = len(found["ns"][PO_RESOURCE])
  summary = (
    f"{meta['date']}; {meta['machine']}; {meta['versions']}; {rounds} "
    f"alternating rounds; scans of {found['steps']} steps; load average "
    f"{meta['load_start']} at the start, {meta['load_end']} at the end; "
    f"the run took {meta['wall_min']:.1f} min{quick}."
  )
  return (
    "\n\n".join(
      [summary, _PROGRAM_ORDER_PROSE, "\n".join(program_order_lines(found))]
    )
    + "\n"
  )


def analysis_markdown(results: dict) -> str:
  """The report of a run of the analysis part alone (``--only-analysis``)."""
  meta = results["meta"]
  quick = " (--quick)" if meta["quick"] else ""
  summary = (
    f"{meta['date']}; {meta['machine']}; {meta['versions']}; "
    f"{len(results['analysis'])} rounds of the order analysis; load average "
    f"{meta['load_start']} at the start, {meta['load_end']} at the end; the "
    f"run took {meta['wall_min']:.1f} min{quick}."
  )
  return summary + "\n\n" + "\n".join(analysis_section(results)) + "\n"
