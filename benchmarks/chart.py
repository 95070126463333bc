"""The chart of one run: dot plots and compile-time curves, in one PNG.

Dot: median over rounds; thick bar: interquartile range; thin bar:
min…max. Linear axes from zero.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from benchmarks import stats
from benchmarks.cases import (
  BASELINE,
  COMPILE_IMPLS,
  IMPLS,
  METRICS,
  OURS,
  Metric,
)
from benchmarks.report import number

_OURS_COLOR, _OTHER_COLOR, _GREY = "#c33", "#36c", "#999"


def _dot_rows(
  ax: Axes,
  rows: Sequence[tuple[str, Sequence[float]]],
  label: Callable[[float], str],
) -> None:
  """One row a name: its spread over rounds, labelled with its median."""
  for y, (name, values) in enumerate(rows):
    s = stats.spread(values)
    ax.hlines(y, s.low, s.high, color=_GREY, linewidth=1)
    ax.hlines(y, s.q1, s.q3, color="#333", linewidth=4)
    color = _OURS_COLOR if name == OURS else _OTHER_COLOR
    ax.plot([s.median], [y], "o", color=color)
    ax.annotate(
      label(s.median),
      (s.high, y),
      xytext=(4, 0),
      textcoords="offset points",
      va="center",
      fontsize=7,
    )
  ax.set_yticks(range(len(rows)), [name for name, _ in rows], fontsize=7)
  ax.invert_yaxis()
  ax.tick_params(axis="x", labelsize=7)


def _metric_plot(ax: Axes, derived: dict, metric: Metric) -> None:
  baseline = [0.0 if metric.kind == "diff" else 1.0]
  rows = [
    (impl, baseline if impl == BASELINE else derived[impl][metric.key])
    for impl in IMPLS
  ]
  _dot_rows(ax, rows, lambda median: number(median, metric.kind))
  ax.set_title(metric.title, fontsize=8)
  ax.set_xlabel(
    "ns over identity" if metric.kind == "diff" else "time / identity's",
    fontsize=7,
  )
  left, right = ax.get_xlim()
  ax.set_xlim(min(0.0, left), right * 1.25 if right > 0 else 1.0)


def _compile_plot(ax: Axes, compiles: dict, axis: str) -> None:
  colors = (_OURS_COLOR, _OTHER_COLOR, _GREY)
  for i, (impl, color) in enumerate(zip(COMPILE_IMPLS, colors, strict=True)):
    sizes = list(compiles[impl][0][axis])
    spreads = [
      stats.spread([r[axis][n] for r in compiles[impl]]) for n in sizes
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


def _handler_plot(ax: Axes, handlers: dict[str, list[float]]) -> None:
  _dot_rows(ax, list(handlers.items()), lambda median: f"{median:.0f}")
  ax.set_xlim(0, max(max(v) for v in handlers.values()) * 1.25)
  ax.set_title("handler alone, same custom call, 1x1 scan", fontsize=8)
  ax.set_xlabel("ns a scan step (whole step)", fontsize=7)


def chart(results: dict, path: pathlib.Path) -> None:
  """Writes the run's chart to ``path`` (PNG): a dot plot per timed metric,
  the compile-time curves of both axes and the handler comparison."""
  fig = Figure(figsize=(17, 6.5))
  flat = list(fig.subplots(2, 4).flat)
  for ax, metric in zip(flat[:5], METRICS, strict=True):
    _metric_plot(ax, results["derived"], metric)
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
