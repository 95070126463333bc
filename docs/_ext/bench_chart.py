"""The ``bench-chart`` directive: the benchmark's cost table, drawn.

The benchmark writes its tables between the ``bench-results`` markers of
docs/performance.md. This directive reads the first of them (cost over a
plain identity: a median and an interquartile range for each implementation
and metric) from the page itself and draws one dot plot per metric, with
the range as a bar, as inline SVG. So the chart always shows the numbers the
page shows, and the build needs neither a benchmark run nor the network.
"""

from __future__ import annotations

import io
import re

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

BEGIN = "<!-- bench-results:begin -->"
# "88 (87…89)", "1.05x (1.04…1.28x)", and the baseline "1x (baseline)".
# Differences can be negative: an interquartile range may reach below 0.
_CELL = re.compile(r"^(-?[\d.]+)x? \((-?[\d.]+)x?…(-?[\d.]+)x?\)$")
_BASELINE = re.compile(r"^([\d.]+)x? \(baseline\)$")


def cost_table(page: str) -> tuple[list[str], dict[str, list[tuple]]]:
  """The metrics and, per implementation, (median, low, high) per metric.

  Raises:
    ValueError: the page has no bench-results table, or a cell is not a
      median with its range.
  """
  start = page.find(BEGIN)
  lines = page[start:].splitlines() if start >= 0 else []
  first = next(
    (i for i, line in enumerate(lines) if line.startswith("| implementation")),
    None,
  )
  if first is None:
    raise ValueError("no bench-results table starting with 'implementation'")
  rows = []
  for line in lines[first:]:
    if not line.startswith("|"):
      break  # the table ends at its first line that is not a row
    if not line.startswith("|---"):
      rows.append([c.strip() for c in line.strip().strip("|").split("|")])
  header, *body = rows
  table: dict[str, list[tuple]] = {}
  for name, *cells in body:
    values = []
    for cell in cells:
      if match := _CELL.match(cell):
        values.append(tuple(float(v) for v in match.groups()))
      elif match := _BASELINE.match(cell):
        value = float(match.group(1))
        values.append((value, value, value))
      else:
        raise ValueError(f"{name}: {cell!r} is not a median (low…high)")
    table[name] = values
  return header[1:], table


def svg(metrics: list[str], table: dict[str, list[tuple]]) -> str:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  names = list(table)
  figure, axes = plt.subplots(
    len(metrics), 1, figsize=(7.5, 1.2 + 1.4 * len(metrics)), squeeze=False
  )
  for column, (metric, ax) in enumerate(zip(metrics, axes[:, 0], strict=True)):
    medians = [table[n][column][0] for n in names]
    low = [table[n][column][0] - table[n][column][1] for n in names]
    high = [table[n][column][2] - table[n][column][0] for n in names]
    ax.errorbar(medians, names, xerr=[low, high], fmt="o", capsize=3)
    ax.invert_yaxis()
    if max(medians) > 100 * max(min(m for m in medians if m > 0), 1e-9):
      ax.set_xscale("log")
      ax.set_title(f"{metric} (log scale)", fontsize=9, loc="left")
    else:
      ax.set_xlim(left=0)
      ax.set_title(metric, fontsize=9, loc="left")
    ax.tick_params(labelsize=8)
    ax.grid(axis="x", alpha=0.3)
  figure.tight_layout()
  out = io.StringIO()
  with matplotlib.rc_context({"svg.hashsalt": "bench-chart"}):
    figure.savefig(out, format="svg", metadata={"Date": None})
  plt.close(figure)
  text = out.getvalue()
  return text[text.index("<svg") :]


class BenchChart(SphinxDirective):
  """Draws the page's bench-results cost table (no content, no options)."""

  def run(self) -> list[nodes.Node]:
    path = self.env.doc2path(self.env.docname)
    try:
      metrics, table = cost_table(path.read_text(encoding="utf-8"))
    except ValueError as e:
      raise self.error(f"bench-chart: {e}") from e
    chart = nodes.raw("", svg(metrics, table), format="html")
    return [nodes.container("", chart, classes=["bench-chart"])]
