"""How the analysis explains itself: races and unordered pairs, rendered
for people."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from entangle_jax.testing._analysis.ops import Op, Race

ORDER_FIX = (
  "make the later call consume a value computed from the earlier call's "
  "result, e.g. `token = entangle(token, x)` with the read's result `x` "
  "before the write."
)
FIX_HINT = "Usual fix: " + ORDER_FIX


ANY_RESOURCE_NOTE = (
  'A call on "any resource" is one made outside Resource or by a Resource '
  "without a name, and one that writes any resource is one the analysis "
  "knows nothing about: give each Resource a name "
  "(Resource(token, name=...)), and declare what your targets do "
  '(entangle_jax.testing.declare_target(target, mode="read", object=0), '
  'mode="none" for a call that keeps no state, or a [tool.entangle-jax] '
  "table in pyproject.toml)."
)

SHOWN_PER_GROUP = 5
"""Pairs shown for each cause; the others are counted (all are in the
list `races` returns)."""


@dataclasses.dataclass(frozen=True)
class Cause:
  """Why a group of pairs is reported, and what to do about it."""

  rank: int
  """Groups are shown in rank order: real hazards first."""
  headline: str
  fix: str


def cause_of(race: Race) -> Cause:
  """The most likely reason `race` is reported."""
  if race.across_devices:
    return Cause(
      2,
      "on another device: calls of this SPMD module on two devices, on "
      "targets declared shared across devices, which nothing in one "
      "module orders",
      "give each device its own object (a handle per shard, and "
      "`distinct_elements = true`), declare the targets `devices = "
      '"per-device"` if each device has its own state, or order the '
      "devices' calls outside this module.",
    )
  pairs = [
    (x, y)
    for x in race.first.accesses
    for y in race.second.accesses
    if "write" in (x.mode, y.mode)
  ]
  for x, y in pairs:
    if (
      x.object is not None and y.object is not None and x.object.same(y.object)
    ):
      if x.resource and y.resource and x.resource != y.resource:
        one, two = sorted((x.resource, y.resource))
        return Cause(
          0,
          f"one object under two names, {one!r} and {two!r}: "
          "two Resources were built on one handle",
          "give every Resource of one handle the same name, or share one "
          "Resource, so that its calls keep program order; or " + ORDER_FIX,
        )
      return Cause(1, "the same object, and nothing orders them", ORDER_FIX)
  if race.first.backward or race.second.backward:
    return Cause(
      2,
      "a backward-pass call (a custom_vjp backward rule, under "
      "transpose(...)) is not covered by the forward call's Resource",
      "make the native calls of the backward rule through a Resource "
      "(res.read / res.write on the token the forward pass saved), so "
      "that they are ordered with the forward pass's calls.",
    )
  if any(
    (x.resource is None and x.object is None)
    or (y.resource is None and y.object is None)
    for x, y in pairs
  ):
    return Cause(
      3, "a call the analysis knows nothing about", ANY_RESOURCE_NOTE
    )
  for x, y in pairs:
    if (
      x.object is not None
      and y.object is not None
      and (x.object.may_differ_by_element(y.object))
    ):
      in_resource = any(
        op.scope != op.user_scope for op in (race.first, race.second)
      )
      names = (
        "; or give each Resource its own name (Resource(token, name=...))"
        if in_resource
        else ""
      )
      return Cause(
        4,
        "may be one object: different elements of one array of handles, "
        "which nothing declares distinct",
        "if distinct elements of that array hold distinct handles, say "
        "so: `distinct_elements = true` in the [tool.entangle-jax] table "
        "of pyproject.toml (or for the target: declare_target(target, "
        f"object=0, distinct_elements=True)){names}.",
      )
  return Cause(
    5,
    "may be one object: nothing says their handles differ",
    "if they touch different objects, give their Resources different "
    "names, or declare what the targets touch (declare_target(target, "
    "object=..., ...)); otherwise " + ORDER_FIX,
  )


def format_races(
  races: Sequence[Race],
  heading: str | None = None,
  *,
  shown_per_group: int | None = SHOWN_PER_GROUP,
) -> str:
  """Renders pairs grouped by their likely cause, each group with its fix.

  Args:
    races: pairs from `races` (shown with what each call accesses, grouped
      by cause, real hazards first), or from `OrderAnalysis.unordered`
      (given a `heading`).
    heading: first line; by default it counts the races. With a heading,
      each pair reads "``first`` is not ordered before ``second``".
    shown_per_group: how many entries of each group to show (None: all);
      the rest are counted. Pairs of the same two targets on the same two
      lines of the user's code are one entry, with their count.

  Raises:
    TypeError: an element of `races` is not a `Race` (a tuple of names
      says too little to render), or `shown_per_group` is not an int or
      None.
    ValueError: `shown_per_group` is below 1.
  """
  if shown_per_group is not None and (
    isinstance(shown_per_group, bool) or not isinstance(shown_per_group, int)
  ):
    raise TypeError(
      "format_races: shown_per_group must be an int or None, not "
      f"{type(shown_per_group).__name__}"
    )
  if shown_per_group is not None and shown_per_group < 1:
    raise ValueError(
      f"format_races: shown_per_group must be at least 1, not {shown_per_group}"
    )
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
  groups: dict[Cause, list[Race]] = {}
  causes_by_kind: dict[tuple, Cause] = {}
  for race in races:
    # A cause depends only on this much of a pair: work it out once per
    # kind of pair, not once for each of a million pairs.
    kind = (_kind(race.first), _kind(race.second), race.across_devices)
    cause = causes_by_kind.get(kind)
    if cause is None:
      cause = causes_by_kind[kind] = cause_of(race)
    groups.setdefault(cause, []).append(race)
  causes = sorted(groups, key=lambda c: c.rank)
  reasons = f", for {len(causes)} reasons" if len(causes) > 1 else ""
  lines = [
    f"{count} pair{'s' * (count != 1)} of calls may conflict and run in "
    f"either order{reasons}:"
  ]
  for cause in causes:
    members = groups[cause]
    if len(causes) > 1 or len(members) > 1:
      lines.append(f"{len(members)} x {cause.headline}:")
    else:
      lines.append(f"{cause.headline}:")
    # Pairs of the same two targets on the same two user lines (a loop
    # over handles, say) are one entry with a count.
    alike: dict[tuple, list[Race]] = {}
    for race in members:
      alike.setdefault(_where(race), []).append(race)
    entries = list(alike.values())
    shown = entries if shown_per_group is None else entries[:shown_per_group]
    for same in shown:
      race = same[0]
      other = ", on another device," if race.across_devices else ""
      times = f" ({len(same)} pairs on these lines)" if len(same) > 1 else ""
      lines.append(f"  {_with_access(race.first)}")
      lines.append(f"    and{other} {_with_access(race.second)}{times}")
    if len(shown) < len(entries):
      more = sum(len(same) for same in entries[len(shown) :])
      lines.append(
        f"  ... and {more} more pair{'s' * (more != 1)} like these "
        "(all are in the list races() returns)"
      )
    lines.append(f"  Fix: {cause.fix}")
    undeclared = _undeclared(members)
    if undeclared:
      lines.append(
        f"  Undeclared targets in these pairs: {', '.join(undeclared)}"
      )
  applied = _declarations_of(races)
  if applied:
    lines.append("Declarations applied: " + "; ".join(applied) + ".")
  return "\n".join(lines)


def _where(race: Race) -> tuple:
  """The two targets and the two user lines of `race`, unordered."""
  ends = sorted(
    (op.target or "", op.location or "") for op in (race.first, race.second)
  )
  return (*ends, race.across_devices)


def _kind(op: Op) -> tuple:
  """What `cause_of` reads of `op`."""
  return (op.accesses, op.backward, op.scope != op.user_scope)


def _undeclared(races: Sequence[Race]) -> list[str]:
  """The targets of calls in `races` that nothing declares and that no
  Resource marks: each may write anything, until declared."""
  return sorted(
    {
      op.target
      for race in races
      for op in (race.first, race.second)
      if op.target
      and op.declaration is None
      and any(a.resource is None and a.object is None for a in op.accesses)
    }
  )


def _declarations_of(races: Sequence[Race]) -> list[str]:
  found = (op.declaration for race in races for op in (race.first, race.second))
  return [str(d) for d in dict.fromkeys(d for d in found if d is not None)]


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
