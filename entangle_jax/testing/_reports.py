"""How the analysis explains itself: unordered pairs, rendered for people."""

from __future__ import annotations

from collections.abc import Sequence

from entangle_jax.testing._ops import Op, Race

FIX_HINT = (
  "Usual fix: make the later call consume a value computed from the earlier "
  "call's result, e.g. `token = entangle(token, x)` with the read's result "
  "`x` before the write."
)


def format_races(races: Sequence[Race], heading: str | None = None) -> str:
  """Renders unordered pairs, one line each, plus the usual fix.

  Args:
    races: pairs from `races` or `OrderAnalysis.unordered`.
    heading: first line; by default it counts the pairs.
  """
  count = len(races)
  if not count and heading is None:
    return "Every pair of ops is ordered."
  lines = [heading or f"{count} pair{'s' * (count != 1)} of ops not ordered:"]
  for race in races:
    lines.append(f"  {race.first.label()}")
    lines.append(f"    is not ordered before {race.second.label()}")
  lines.append(FIX_HINT)
  return "\n".join(lines)


def empty_witness_note(entangles: Sequence[Op]) -> str:
  count = len(entangles)
  lines = [
    f"Note: {count} entangle call{'s' * (count != 1)} here only "
    f"{'have' if count != 1 else 'has'} zero-size witnesses, which order "
    "nothing (an array with no elements holds no bytes to depend on; XLA "
    "replaces it by an empty constant). Pass a witness with at least one "
    "element, such as the read's result itself:"
  ]
  lines += [f"  {op.label()}" for op in entangles]
  return "\n".join(lines)
