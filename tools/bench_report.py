"""Turns the benchmark's rounds into a Markdown report and a chart.

Input is what ``tools/bench.py`` collects: for every implementation, one
dict of metrics per round. Every timed number is reported as its median over
rounds with its interquartile range (IQR) and compared, round by round,
against the other implementations and against the identity-vs-identity
noise floor of the same run.
"""

from __future__ import annotations

import dataclasses
import pathlib
import statistics

import bench_stats

OURS = "entangle-jax"
PEER = "entangle-jax 0.1.1"
BARRIER = "optimization_barrier"
BASELINE = "identity"
NOISE = "identity (again)"
IMPLS = (OURS, PEER, BARRIER, BASELINE, NOISE)
COMPILE_IMPLS = (OURS, BARRIER, BASELINE)


@dataclasses.dataclass(frozen=True)
class Metric:
  """A timed metric: ``kind`` "diff" is ns over identity, "ratio" is x it."""

  key: str
  header: str
  title: str
  kind: str
  raw: str  # the worker's key: seconds per call of the whole program


METRICS = (
  Metric(
    "scan_1x1_ns",
    "scan 1x1, ns a call",
    "scan, 1 leaf x 1 witness",
    "diff",
    "scan_1x1_s",
  ),
  Metric(
    "scan_3x4_ns",
    "scan 3x4, ns a step",
    "scan, 3 leaves x 4 witnesses",
    "diff",
    "scan_3x4_s",
  ),
  Metric(
    "resource_1e3",
    "program, B=1e3, x identity",
    "jit(vmap(write, read, entangle, write)), B=1e3",
    "ratio",
    "resource_1e+03_s",
  ),
  Metric(
    "resource_1e5",
    "program, B=1e5, x identity",
    "jit(vmap(write, read, entangle, write)), B=1e5",
    "ratio",
    "resource_1e+05_s",
  ),
  Metric(
    "donated_1e5",
    "donated, B=1e5, x identity",
    "jit(vmap(entangle)), donated (1e5, 4) payload",
    "ratio",
    "donated_1e+05_s",
  ),
)

STRUCTURE = (
  ("custom_calls_3x4", "custom calls, 3 leaves x 4 witnesses"),
  ("collectives_sharded", "collectives, 8-way sharded payload"),
  ("copies_donated", "copies, donated payload"),
  ("copies_resource", "copies, vmap program (B=1e3)"),
  ("loops_resource", "while loops, vmap program (B=1e3)"),
  ("copies_batched_donated", "copies, jit(vmap) with donated payload"),
)


def derive(timings: dict[str, list[dict]], steps: int) -> dict:
  """Per-round metrics of each implementation against the same round's
  identity: ns a scan step over it, or time as a multiple of its time.

  ``derived[impl][key + "_total"]`` is the whole program's time in the
  metric's unit (ns a scan step, or identity's time): the size against
  which the noise floor is scaled.
  """
  base = timings[BASELINE]
  derived: dict[str, dict[str, list[float]]] = {}
  for impl, rounds in timings.items():
    derived[impl] = {}
    for metric in METRICS:
      times = [r[metric.raw] for r in rounds]
      base_times = [b[metric.raw] for b in base]
      if metric.kind == "diff":
        totals = [t / steps * 1e9 for t in times]
        values = [
          d / steps * 1e9 for d in bench_stats.paired(times, base_times)
        ]
      else:
        totals = values = bench_stats.ratios(times, base_times)
      derived[impl][metric.key] = values
      derived[impl][metric.key + "_total"] = totals
  return derived


def relative_noise(timings: dict[str, list[dict]], metric: Metric) -> float:
  """Identity against identity: the relative gap of the median."""
  return bench_stats.relative_noise(
    [r[metric.raw] for r in timings[NOISE]],
    [r[metric.raw] for r in timings[BASELINE]],
  )


def _number(value: float, kind: str) -> str:
  if kind == "diff" and abs(value) < 0.05:
    return "0.0"  # not "-0.0"
  if kind == "diff":
    return f"{value:.0f}" if abs(value) >= 9.5 else f"{value:.1f}"
  if value >= 100:
    return f"{value:.0f}x"
  return f"{value:.2f}x"


def _cell(values: list[float], kind: str) -> str:
  s = bench_stats.spread(values)
  return (
    f"{_number(s.median, kind)} "
    f"({_number(s.q1, kind).rstrip('x')}…{_number(s.q3, kind)})"
  )


def timing_table(derived: dict) -> list[str]:
  lines = [
    "| implementation | " + " | ".join(m.header for m in METRICS) + " |",
    "|---" * (len(METRICS) + 1) + "|",
  ]
  for impl in IMPLS:
    if impl == BASELINE:
      cells = [
        "0 (baseline)" if m.kind == "diff" else "1x (baseline)" for m in METRICS
      ]
    else:
      cells = [_cell(derived[impl][m.key], m.kind) for m in METRICS]
    name = "identity vs identity (noise floor)" if impl == NOISE else impl
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  return lines


def comparisons(timings: dict, derived: dict) -> list[dict]:
  """entangle-jax against the peer (and identity, for the vmap programs).

  The noise threshold of a comparison is the run's relative
  identity-vs-identity gap (`bench_stats.relative_noise`) times the compared
  program's whole time, so a long program is not judged by the noise of a
  short one.
  """
  found = []
  for metric in METRICS:
    noise = relative_noise(timings, metric)
    others = (PEER, BASELINE) if metric.kind == "ratio" else (PEER,)
    for other in others:
      ours = derived[OURS][metric.key]
      if other == BASELINE:
        theirs = [1.0] * len(ours)
        size = 1.0
      else:
        theirs = derived[other][metric.key]
        size = statistics.median(derived[other][metric.key + "_total"])
      verdict = bench_stats.compare(
        bench_stats.paired(ours, theirs), noise * size
      )
      ratio = None
      if all(t > 0 for t in theirs) and all(o > 0 for o in ours):
        per_round = bench_stats.ratios(ours, theirs)
        ratio = (
          statistics.median(per_round),
          bench_stats.bootstrap_ci(per_round),
        )
      found.append(
        {
          "metric": metric,
          "other": other,
          "verdict": verdict,
          "ratio": ratio,
          "relative_noise": noise,
        }
      )
  return found


def _conclusion(verdict: bench_stats.Verdict) -> str:
  if verdict.conclusion == bench_stats.PARITY:
    return bench_stats.PARITY
  return f"entangle-jax {verdict.conclusion}"


def _sig(value: float) -> str:
  # Two decimals, or three significant digits for ratios far below 1.
  return f"{value:.2f}" if abs(value) >= 0.1 else f"{value:.3g}"


def comparison_table(found: list[dict]) -> list[str]:
  lines = [
    "| metric | entangle-jax vs | difference, median (95% CI) | ratio, "
    "median (95% CI) | noise threshold | conclusion |",
    "|---|---|---|---|---|---|",
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
    lines.append(
      f"| {metric.header} | {row['other']} | {difference} | {ratio} | "
      f"{threshold} | {_conclusion(verdict)} |"
    )
  return lines


def compile_table(compiles: dict[str, list[dict]]) -> list[str]:
  sizes = list(compiles[OURS][0]["payload"])
  lines = [
    "| leaves | axis | "
    + " | ".join(f"{impl}, s" for impl in COMPILE_IMPLS)
    + " | entangle-jax / optimization_barrier |",
    "|---" * (len(COMPILE_IMPLS) + 3) + "|",
  ]
  for axis in ("payload", "witness"):
    for n in sizes:
      cells = []
      for impl in COMPILE_IMPLS:
        s = bench_stats.spread([r[axis][n] for r in compiles[impl]])
        cells.append(f"{s.median:.3g} ({s.low:.3g}…{s.high:.3g})")
      ratio = bench_stats.spread(
        bench_stats.ratios(
          [r[axis][n] for r in compiles[OURS]],
          [r[axis][n] for r in compiles[BARRIER]],
        )
      )
      cells.append(f"{ratio.median:.2f}x ({ratio.low:.2f}…{ratio.high:.2f})")
      lines.append(f"| {n} | {axis} | " + " | ".join(cells) + " |")
  return lines


def handler_lines(handlers: dict[str, list[float]]) -> list[str]:
  """This checkout's handler against the peer's, behind identical calls."""
  ours, peer = handlers[OURS], handlers[PEER]
  again = handlers[f"{OURS} (again)"]
  noise = bench_stats.relative_noise(again, ours)
  verdict = bench_stats.compare(
    bench_stats.paired(ours, peer), noise * statistics.median(peer)
  )
  lines = [
    "| handler behind the same custom call | ns a scan step, median (IQR) |",
    "|---|---|",
  ]
  for name, values in handlers.items():
    s = bench_stats.spread(values)
    lines.append(f"| {name} | {s.median:.0f} ({s.q1:.0f}…{s.q3:.0f}) |")
  lo, hi = verdict.ci
  lines += [
    "",
    f"This checkout's handler minus the peer's: "
    f"{verdict.median_difference:+.0f} ns a call (95% CI {lo:+.0f}…{hi:+.0f}; "
    f"noise threshold ±{verdict.threshold:.0f}, from this checkout's handler "
    f"against itself, {noise:.1%}): {_conclusion(verdict)}.",
  ]
  return lines


def structure_table(structure: dict[str, dict]) -> list[str]:
  impls = [i for i in IMPLS if i in structure]
  lines = [
    "| compiled HLO | " + " | ".join(impls) + " |",
    "|---" * (len(impls) + 1) + "|",
  ]
  for key, label in STRUCTURE:
    cells = [str(structure[i][key]) for i in impls]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return lines


def markdown(results: dict) -> str:
  """The README-ready report of one run."""
  derived = results["derived"]
  found = comparisons(results["timings"], derived)
  meta = results["meta"]
  lines = [
    f"{meta['date']}; {meta['machine']}; {meta['versions']}; "
    f"{meta['timing_rounds']} alternating rounds of timing, "
    f"{meta['compile_rounds']} of compilation; scans of {meta['steps']} "
    f"steps; load average {meta['load_start']} at the start, "
    f"{meta['load_end']} at the end; the run took {meta['wall_min']:.1f} min"
    f"{' (--quick)' if meta['quick'] else ''}.",
    "",
    "Cost over a plain identity, median over rounds (interquartile range).",
    "A round's value is the fastest of repeated calls in its subprocess",
    "(the call least disturbed by other load); the spread is over rounds:",
    "",
    *timing_table(derived),
    "",
    "entangle-jax against the others, paired round by round (differences in",
    "ns for the scans, in multiples of identity's time for the programs). A",
    "difference counts when its 95% bootstrap interval excludes zero and it",
    "exceeds the noise threshold: how far from zero the median gap between",
    "identity and identity could lie in this run (the far end of its 95%",
    "bootstrap interval, relative, in parentheses), times the compared",
    "program's whole time. Otherwise it is parity within noise:",
    "",
    *comparison_table(found),
    "",
    "Trace + lower + compile time of one call with n payload leaves (1",
    "witness) or n witness leaves (1 payload leaf), median (min…max) over",
    "rounds:",
    "",
    *compile_table(results["compile"]),
    "",
    *structure_table(results["structure"]),
    "",
    "Both handlers in one process, each behind a `jax.ffi.ffi_call` with",
    "the same operands, aliasing and API version (so only the handler",
    "differs), alternated over "
    f"{len(results['handlers'][OURS])} rounds of a 1x1 scan:",
    "",
    *handler_lines(results["handlers"]),
    "",
    "The custom call each package emits in the 1x1 scan (compiled HLO, "
    "metadata and names removed):",
    "",
    "```",
  ]
  for impl in (OURS, PEER):
    for line in results["structure"][impl]["custom_call_1x1"]:
      lines.append(f"{impl}: {line}")
  lines.append("```")
  return "\n".join(lines) + "\n"


def _dot_plot(ax, derived: dict, metric: Metric) -> None:
  impls = list(IMPLS)
  for y, impl in enumerate(impls):
    if impl == BASELINE:
      values = [0.0 if metric.kind == "diff" else 1.0]
    else:
      values = derived[impl][metric.key]
    s = bench_stats.spread(values)
    ax.hlines(y, s.low, s.high, color="#999", linewidth=1)
    ax.hlines(y, s.q1, s.q3, color="#333", linewidth=4)
    ax.plot([s.median], [y], "o", color="#c33" if impl == OURS else "#36c")
    ax.annotate(
      _number(s.median, metric.kind),
      (s.high, y),
      xytext=(4, 0),
      textcoords="offset points",
      va="center",
      fontsize=7,
    )
  ax.set_yticks(range(len(impls)), impls, fontsize=7)
  ax.invert_yaxis()
  ax.set_title(metric.title, fontsize=8)
  ax.set_xlabel(
    "ns over identity" if metric.kind == "diff" else "time / identity's",
    fontsize=7,
  )
  left, right = ax.get_xlim()
  ax.set_xlim(min(0.0, left), right * 1.25 if right > 0 else 1.0)
  ax.tick_params(axis="x", labelsize=7)


def _compile_plot(ax, compiles: dict, axis: str) -> None:
  colors = ("#c33", "#36c", "#999")
  for i, (impl, color) in enumerate(zip(COMPILE_IMPLS, colors, strict=True)):
    sizes = list(compiles[impl][0][axis])
    spreads = [
      bench_stats.spread([r[axis][n] for r in compiles[impl]]) for n in sizes
    ]
    xs = [int(n) for n in sizes]
    medians = [s.median for s in spreads]
    ax.errorbar(
      xs,
      medians,
      yerr=[
        [s.median - s.low for s in spreads],
        [s.high - s.median for s in spreads],
      ],
      fmt="o-",
      color=color,
      label=impl,
      markersize=3,
      capsize=2,
    )
    ax.annotate(
      f"{medians[-1]:.2g} s",
      (xs[-1], medians[-1]),
      xytext=(-4, 4 - 10 * i),  # staggered: the lines may end close together
      textcoords="offset points",
      ha="right",
      fontsize=7,
      color=color,
    )
  ax.set_xlim(left=0)
  ax.set_ylim(bottom=0)
  ax.set_title(f"compile time vs {axis} leaves", fontsize=8)
  ax.set_xlabel(f"{axis} leaves", fontsize=7)
  ax.set_ylabel("seconds (min…max bars)", fontsize=7)
  ax.tick_params(labelsize=7)
  ax.legend(fontsize=6)


def _handler_plot(ax, handlers: dict[str, list[float]]) -> None:
  names = list(handlers)
  for y, name in enumerate(names):
    s = bench_stats.spread(handlers[name])
    ax.hlines(y, s.low, s.high, color="#999", linewidth=1)
    ax.hlines(y, s.q1, s.q3, color="#333", linewidth=4)
    ax.plot([s.median], [y], "o", color="#c33" if name == OURS else "#36c")
    ax.annotate(
      f"{s.median:.0f}",
      (s.high, y),
      xytext=(4, 0),
      textcoords="offset points",
      va="center",
      fontsize=7,
    )
  ax.set_yticks(range(len(names)), names, fontsize=7)
  ax.invert_yaxis()
  ax.set_xlim(0, max(max(v) for v in handlers.values()) * 1.25)
  ax.set_title("handler alone, same custom call, 1x1 scan", fontsize=8)
  ax.set_xlabel("ns a scan step (whole step)", fontsize=7)
  ax.tick_params(axis="x", labelsize=7)


def chart(results: dict, path: pathlib.Path) -> None:
  """Dot plots (dot: median over rounds, thick bar: interquartile range,
  thin bar: min…max) and compile-time curves, on linear axes from zero."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(2, 4, figsize=(17, 6.5))
  flat = list(axes.flat)
  for ax, metric in zip(flat[:5], METRICS, strict=True):
    _dot_plot(ax, results["derived"], metric)
  _compile_plot(flat[5], results["compile"], "payload")
  _compile_plot(flat[6], results["compile"], "witness")
  _handler_plot(flat[7], results["handlers"])
  meta = results["meta"]
  fig.suptitle(
    f"{meta['date']}, {meta['machine']}. Dot: median over rounds; thick "
    "bar: interquartile range; thin bar: min…max. Linear axes from zero.",
    fontsize=9,
  )
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
