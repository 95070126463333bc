"""How the analysis explains itself: races and unordered pairs, rendered
for people."""

from __future__ import annotations

from collections.abc import Sequence

from entangle_jax.testing._order.ops import Op, Race

FIX_HINT = (
  "Usual fix: make the later call consume a value computed from the earlier "
  "call's result, e.g. `token = entangle(token, x)` with the read's result "
  "`x` before the write."
)


ANY_RESOURCE_NOTE = (
  'A call on "any resource" is one made outside Resource or by a Resource '
  "without a name, and one that writes any resource is one the analysis "
  "knows nothing about: give each Resource a name "
  "(Resource(token, name=...)), and declare read-only targets with "
  'entangle_jax.testing.declare_target_mode(target, "read").'
)


def format_races(races: Sequence[Race], heading: str | None = None) -> str:
  """Renders pairs one line each, plus the usual fix.

  Args:
    races: pairs from `races` (shown with what each call accesses), or
      from `OrderAnalysis.unordered` (given a `heading`).
    heading: first line; by default it counts the races. With a heading,
      each pair reads "``first`` is not ordered before ``second``".

  Raises:
    TypeError: an element of `races` is not a `Race` (a tuple of names
      says too little to render).
  """
  for index, race in enumerate(races):
    if not isinstance(race, Race):
      raise TypeError(
        f"format_races: races[{index}] is {type(race).__name__} {race!r}, "
        "not a Race: pass what races() or OrderAnalysis.unordered() returned"
      )
  count = len(races)
  if not count and heading is None:
    return "No races: every two calls that may conflict are ordered."
  if heading is not None:
    lines = [heading]
    for race in races:
      lines.append(f"  {race.first.label()}")
      lines.append(f"    is not ordered before {race.second.label()}")
    return "\n".join([*lines, FIX_HINT])
  lines = [
    f"{count} pair{'s' * (count != 1)} of calls may conflict and run in "
    "either order:"
  ]
  for race in races:
    lines.append(f"  {_with_access(race.first)}")
    lines.append(f"    and {_with_access(race.second)}")
  lines.append(FIX_HINT)
  ops = [op for race in races for op in (race.first, race.second)]
  if any(a.resource is None for op in ops for a in op.accesses):
    lines.append(ANY_RESOURCE_NOTE)
  return "\n".join(lines)


def _with_access(op: Op) -> str:
  what, rest = op.label().split(" ", 1)
  return f"{what} ({op.access_text}) {rest}"


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
