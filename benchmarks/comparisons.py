"""From rounds to per-round metrics and noise-aware comparisons.

Input is what the runner collects: for every implementation, one dict of
metrics per round. Every comparison pairs values of the same round, and
judges their difference against the identity-vs-identity noise floor of the
same run (`benchmarks.stats`).
"""

from __future__ import annotations

import statistics

from benchmarks import stats
from benchmarks.cases import BASELINE, METRICS, NOISE, OURS, PEER, Metric


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
        values = [d / steps * 1e9 for d in stats.paired(times, base_times)]
      else:
        totals = values = stats.ratios(times, base_times)
      derived[impl][metric.key] = values
      derived[impl][metric.key + "_total"] = totals
  return derived


def relative_noise(timings: dict[str, list[dict]], metric: Metric) -> float:
  """Identity against identity: the relative gap of the median."""
  return stats.relative_noise(
    [r[metric.raw] for r in timings[NOISE]],
    [r[metric.raw] for r in timings[BASELINE]],
  )


def comparisons(timings: dict, derived: dict) -> list[dict]:
  """entangle-jax against the peer (and identity, for the vmap programs).

  The noise threshold of a comparison is the run's relative
  identity-vs-identity gap (`stats.relative_noise`) times the compared
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
      verdict = stats.compare(stats.paired(ours, theirs), noise * size)
      ratio = None
      if all(t > 0 for t in theirs) and all(o > 0 for o in ours):
        per_round = stats.ratios(ours, theirs)
        ratio = (statistics.median(per_round), stats.bootstrap_ci(per_round))
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
