"""Statistics for the benchmark: spreads over rounds and noise-aware verdicts.

Plain Python on lists of floats, so that the functions are testable without
JAX and the results do not depend on NumPy's versions.

Every timed number in the benchmark is a list with one value per round (one
subprocess run of one implementation). Rounds are the unit of repetition
because most of the noise on a shared machine changes between processes and
minutes, not between back-to-back calls in one process.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from collections.abc import Callable, Sequence

PARITY = "parity within noise"


@dataclasses.dataclass(frozen=True)
class Spread:
  """Median, quartiles and extremes of one metric over rounds."""

  median: float
  q1: float
  q3: float
  low: float
  high: float
  n: int


def quantile(values: Sequence[float], q: float) -> float:
  """The ``q``-quantile (0 <= q <= 1), linear between order statistics."""
  if not values:
    raise ValueError("quantile of no values")
  if not 0.0 <= q <= 1.0:
    raise ValueError(f"quantile level {q} is outside [0, 1]")
  ordered = sorted(values)
  position = q * (len(ordered) - 1)
  below = int(position)
  above = min(below + 1, len(ordered) - 1)
  fraction = position - below
  return ordered[below] + (ordered[above] - ordered[below]) * fraction


def spread(values: Sequence[float]) -> Spread:
  """Median, interquartile range and range of ``values``."""
  if not values:
    raise ValueError("spread of no values")
  return Spread(
    median=statistics.median(values),
    q1=quantile(values, 0.25),
    q3=quantile(values, 0.75),
    low=min(values),
    high=max(values),
    n=len(values),
  )


def bootstrap_ci(
  values: Sequence[float],
  statistic: Callable[[Sequence[float]], float] = statistics.median,
  level: float = 0.95,
  resamples: int = 4000,
  seed: int = 0,
) -> tuple[float, float]:
  """Percentile bootstrap confidence interval of ``statistic(values)``.

  Seeded, so the same rounds always give the same interval. With few
  rounds the interval is coarse (it can only end on resampled medians),
  which errs toward calling differences noise.
  """
  if len(values) < 2:
    raise ValueError(f"a bootstrap needs 2 or more values, got {len(values)}")
  if not 0.0 < level < 1.0:
    raise ValueError(f"confidence level {level} is outside (0, 1)")
  rng = random.Random(seed)
  estimates = [
    statistic(rng.choices(values, k=len(values))) for _ in range(resamples)
  ]
  tail = (1.0 - level) / 2.0
  return quantile(estimates, tail), quantile(estimates, 1.0 - tail)


def paired(a: Sequence[float], b: Sequence[float]) -> list[float]:
  """Per-round differences ``a[r] - b[r]`` (same round, same machine state)."""
  if len(a) != len(b):
    raise ValueError(f"unpaired rounds: {len(a)} values against {len(b)}")
  return [x - y for x, y in zip(a, b, strict=True)]


def ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
  """Per-round ratios ``a[r] / b[r]``; a zero denominator raises."""
  if len(a) != len(b):
    raise ValueError(f"unpaired rounds: {len(a)} values against {len(b)}")
  if any(y == 0 for y in b):
    raise ZeroDivisionError("a ratio against a zero value")
  return [x / y for x, y in zip(a, b, strict=True)]


def relative_noise(again: Sequence[float], base: Sequence[float]) -> float:
  """How far apart two runs of the same program could come, as a fraction.

  ``again`` and ``base`` are per-round times of one program run twice
  (identity against identity). Comparisons report medians over rounds, so
  the noise that matters is that of the median gap: this returns the end
  of the 95% bootstrap interval of the median of ``again / base - 1`` that
  lies farther from zero. Scaled by a measured time, it is the difference
  in that time's median that chance alone could produce in this run.
  """
  if len(again) < 2:
    raise ValueError(f"need 2 or more noise-floor rounds, got {len(again)}")
  gaps = [r - 1.0 for r in ratios(again, base)]
  lo, hi = bootstrap_ci(gaps)
  return max(abs(lo), abs(hi))


@dataclasses.dataclass(frozen=True)
class Verdict:
  """How two implementations compare on one metric, noise considered."""

  median_difference: float
  ci: tuple[float, float]
  threshold: float
  conclusion: str  # "lower", "higher" or PARITY


def compare(differences: Sequence[float], threshold: float) -> Verdict:
  """Compares per-round paired differences ``a - b`` against the noise.

  A difference counts only when the bootstrap 95% interval of its median
  excludes zero and its median exceeds ``threshold`` (the difference the
  noise floor allows, in the same unit); otherwise the two are at parity
  within noise.
  """
  if threshold < 0:
    raise ValueError(f"negative noise threshold {threshold}")
  median = statistics.median(differences)
  ci = bootstrap_ci(differences)
  excludes_zero = ci[0] > 0 or ci[1] < 0
  if excludes_zero and abs(median) > threshold:
    conclusion = "lower" if median < 0 else "higher"
  else:
    conclusion = PARITY
  return Verdict(median, ci, threshold, conclusion)
