"""Races and contradictions in a sanitized run's calls.

* A race is two calls on one object, at least one a write by its
  declaration (undeclared: a write), that overlapped in time
  (``"overlap"``), or that, in one execution of one module, ran in another
  order than the program's (``"out of order"``: the later call had
  returned before the earlier one began).
* A contradiction is two calls in one execution that the declarations say
  never touch one object (a safe pair, or different elements of one array
  declared distinct, as the static check reads them) or that were made
  under different ``Resource`` names (named ``Resource`` objects, or the
  arguments of ``in_program_order(f, distinct_arguments=True)``), whose
  object operands held the same value; or one call whose object operand,
  declared to hold distinct handles, held one twice.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Iterator

from entangle_jax._src import conflict_rule
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax.testing._sanitize.calls import (
  SanitizedCall,
  SanitizedObject,
  Touch,
  touches,
)

OVERLAP = "overlap"
OUT_OF_ORDER = "out of order"


@dataclasses.dataclass(frozen=True, eq=False)
class SanitizerRace:
  """Two calls on one object that raced at run time.

  Attributes:
    kind: ``"overlap"`` (they ran at the same time) or ``"out of order"``
      (in one execution, `second` returned before `first` began, though
      the program made `first` first).
    first: for ``"out of order"`` the call the program made first; for
      ``"overlap"`` the one that began first.
    second: the other call.
    object: the object both touched.
  """

  kind: str
  first: SanitizedCall
  second: SanitizedCall
  object: SanitizedObject

  def __str__(self) -> str:
    return (
      f"{self.kind}: {self.first.target} and {self.second.target} on "
      f"{self.object}"
    )


@dataclasses.dataclass(frozen=True, eq=False)
class Contradiction:
  """Calls the declarations call distinct that named one object.

  Attributes:
    first, second: the calls (the same call when one call's operand held
      one handle twice).
    object: the object both named.
    declaration: what they contradict, in words.
  """

  first: SanitizedCall
  second: SanitizedCall
  object: SanitizedObject
  declaration: str

  def __str__(self) -> str:
    return (
      f"{self.first.target} and {self.second.target} named {self.object}, "
      f"though {self.declaration}"
    )


def touched(
  calls: list[SanitizedCall], declarations: Declarations
) -> dict[SanitizedCall, Touch]:
  """What each call touches."""
  return {c: touches(c, declarations) for c in calls}


def _by_object(
  found: dict[SanitizedCall, Touch],
) -> dict[SanitizedObject, list[SanitizedCall]]:
  objects: dict[SanitizedObject, list[SanitizedCall]] = defaultdict(list)
  for call, touch in found.items():
    for obj in touch.objects:
      objects[obj].append(call)
  return objects


def _writes(
  found: dict[SanitizedCall, Touch], a: SanitizedCall, b: SanitizedCall
) -> bool:
  return conflict_rule.modes_conflict(found[a].mode, found[b].mode)


def overlaps(found: dict[SanitizedCall, Touch]) -> Iterator[SanitizerRace]:
  """Pairs on one object, one writing, that ran at the same time."""
  for obj, calls in _by_object(found).items():
    ordered = sorted(calls, key=lambda c: c.start_ns)
    for i, a in enumerate(ordered):
      for b in ordered[i + 1 :]:
        if b.start_ns >= a.end_ns:
          break
        if _writes(found, a, b):
          yield SanitizerRace(OVERLAP, a, b, obj)


def _executions(
  calls: list[SanitizedCall],
) -> dict[tuple[int, int], list[SanitizedCall]]:
  """The calls with a known place, by execution (module, run id)."""
  runs: dict[tuple[int, int], list[SanitizedCall]] = defaultdict(list)
  for call in calls:
    if call.site is not None:
      runs[(call.site.module.serial, call.run_id)].append(call)
  return runs


def out_of_order(found: dict[SanitizedCall, Touch]) -> Iterator[SanitizerRace]:
  """Pairs on one object, one writing, that in one execution ran in
  another order than the program's.

  Each place's calls are paired with the other place's by rank when both
  ran equally often (one loop, or straight-line code), or all with the one
  call when one ran once; other pairings are not compared.
  """
  for run in _executions(list(found)).values():
    for obj, calls in _by_object({c: found[c] for c in run}).items():
      at: dict[int, list[SanitizedCall]] = defaultdict(list)
      for call in calls:
        assert call.site is not None
        at[call.site.position].append(call)
      for p, q in itertools.combinations(sorted(at), 2):
        before = sorted(at[p], key=lambda c: c.start_ns)
        after = sorted(at[q], key=lambda c: c.start_ns)
        if not _writes(found, before[0], after[0]):
          continue
        for a, b in _paired(before, after):
          if b.end_ns <= a.start_ns:
            yield SanitizerRace(OUT_OF_ORDER, a, b, obj)


def _paired(
  before: list[SanitizedCall], after: list[SanitizedCall]
) -> list[tuple[SanitizedCall, SanitizedCall]]:
  if len(before) == len(after):
    return list(zip(before, after, strict=True))
  if len(before) == 1:
    return [(before[0], b) for b in after]
  if len(after) == 1:
    return [(a, after[0]) for a in before]
  return []


def races(found: dict[SanitizedCall, Touch]) -> list[SanitizerRace]:
  """Every race: the overlaps, then the calls out of order."""
  return [*overlaps(found), *out_of_order(found)]


def contradictions(
  found: dict[SanitizedCall, Touch],
  declarations: Declarations,
  distinct_by_analysis=None,
) -> list[Contradiction]:
  """Calls declared distinct that named one object (see the module).

  `distinct_by_analysis(a, b)`: why the static check, reading the
  declarations and ``Resource`` names, takes the two calls for different
  objects, in words, or None when it does not (the argument None: only
  safe pairs and repeated handles in one call are checked).
  """
  out: list[Contradiction] = []
  for call, touch in found.items():
    d = touch.declaration
    if d is None or d.object is None or not declarations.distinct_for(d):
      continue
    values = call.values_of(d.object) or ()
    for value in sorted({v for v in values if values.count(v) > 1}):
      out.append(
        Contradiction(
          call,
          call,
          SanitizedObject(call.family, value),
          f"{d} says different elements of operand {d.object} are "
          f"different objects",
        )
      )
  for run in _executions(list(found)).values():
    for obj, calls in _by_object({c: found[c] for c in run}).items():
      if obj.value is None:
        continue
      for a, b in itertools.combinations(calls, 2):
        if a.site is b.site or not _writes(found, a, b):
          continue
        pair = declarations.safe(a.target, b.target)
        if pair is not None:
          out.append(
            Contradiction(
              a,
              b,
              obj,
              f"the safe pair {pair.first} / {pair.second} ({pair.reason}; "
              f"from {pair.source}) says their calls never conflict",
            )
          )
        elif distinct_by_analysis is not None and (
          why := distinct_by_analysis(a, b)
        ):
          out.append(Contradiction(a, b, obj, why))
  return out
