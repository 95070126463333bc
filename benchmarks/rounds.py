"""Alternating rounds: every round measures every candidate once.

The order rotates from round to round and reverses every other round, so
that a slow minute on a shared machine, or the first or last place in a
round, hits every candidate alike. Both the runner (one subprocess per
measurement) and the handler part (programs in one process) use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def round_order(names: Sequence[str], r: int) -> list[str]:
  """Round ``r``'s order: rotated by ``r``, reversed every other round."""
  shift = r % len(names)
  rotated = [*names[shift:], *names[:shift]]
  return rotated[::-1] if r % 2 else rotated


def alternate(
  names: Sequence[str],
  rounds: int,
  measure: Callable[[str], T],
  announce: Callable[[int, str], None] | None = None,
) -> dict[str, list[T]]:
  """``measure(name)`` for every name in each of ``rounds`` rounds.

  Returns every name's results, one a round, in round order.
  ``announce(r, name)``, when given, is called before each measurement.
  """
  results: dict[str, list[T]] = {name: [] for name in names}
  for r in range(rounds):
    for name in round_order(names, r):
      if announce is not None:
        announce(r, name)
      results[name].append(measure(name))
  return results
