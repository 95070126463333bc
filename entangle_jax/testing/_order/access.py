"""What each call reads and writes, in the race check's terms: the
conflict model behind ``races``.

Two calls *conflict* when they may touch one object and at least one of
them writes it. What a call does, and which operand names its object, is
the one access policy's answer (`entangle_jax._src.access_policy`: a
``Resource`` record, else the target's declaration, else "may write
anything"); this module turns its `Footprint` into the check's `Access`
records, whose objects are HLO values (`entangle_jax.testing._order.objects`).
When two calls conflict, given that, is `entangle_jax._src.conflict_rule`'s,
which ``in_program_order`` and the sanitizer ask too.
"""

from __future__ import annotations

import dataclasses

from entangle_jax._src import conflict_rule
from entangle_jax._src.access_marker import Mode
from entangle_jax._src.access_policy import Footprint
from entangle_jax._src.conflict_rule import Evidence, Verdict
from entangle_jax.testing._order import bitsets, objects


@dataclasses.dataclass(frozen=True)
class Access:
  """One access of a call: the ``Resource`` name it was made under (None:
  none, or an unnamed one), its mode, and the object its operands name
  (None: not known, so any object)."""

  resource: str | None
  mode: Mode
  object: objects.ObjectRef | None = None

  def __str__(self) -> str:
    verb = "reads" if self.mode == "read" else "writes"
    if self.resource is None and self.object is None:
      return f"{verb} any resource"
    parts = [] if self.resource is None else [repr(self.resource)]
    if self.object is not None:
      parts.append(f"object {self.object}")
    return f"{verb} {', '.join(parts)}"


UNKNOWN = (Access(None, "write"),)
"""What a call accesses when nothing says otherwise."""


def accesses_of(found: Footprint[objects.ObjectRef]) -> tuple[Access, ...]:
  """The race check's accesses of a call whose footprint the one policy
  found (`entangle_jax._src.access_policy.footprint`): one per
  ``Resource`` record it was made in, the innermost on its object, or
  one access of its declared mode; none for a call that touches nothing."""
  if found.records:
    *outer, inner = found.records
    return (
      *(Access(r.resource, r.mode) for r in outer),
      Access(inner.resource, inner.mode, found.object),
    )
  if found.mode == "none":
    return ()
  return (Access(None, found.mode, found.object),)


def _evidence(
  x: Access,
  y: Access,
  across_devices: bool = False,
  undeclared: tuple[bool, bool] = (False, False),
) -> Evidence:
  """What the module shows of the objects of accesses `x` and `y`, for
  the one rule (`entangle_jax._src.conflict_rule`), with `undeclared`:
  per call, whether nothing declares its target. Made on two different
  devices of one SPMD module, one value is one object only when every
  device holds it alike, and values built to differ on each device are
  different objects (`objects.ObjectRef.same_across_devices`,
  `objects.ObjectRef.distinct_across_devices`)."""
  same = distinct = elements = False
  if x.object is not None and y.object is not None:
    if across_devices:
      same = x.object.same_across_devices(y.object)
      distinct = x.object.distinct_across_devices(y.object)
    else:
      same = x.object.same(y.object)
      distinct = x.object.distinct(y.object)
    elements = x.object.may_differ_by_element(y.object)
  return Evidence(
    same,
    distinct,
    (x.resource, y.resource),
    (_anything(x), _anything(y)),
    elements,
    undeclared,
  )


def _anything(x: Access) -> bool:
  """Whether nothing names the object of `x`: no object, no name."""
  return x.resource is None and x.object is None


def verdicts(
  a: tuple[Access, ...],
  b: tuple[Access, ...],
  *,
  safe: bool = False,
  across_devices: bool = False,
  devices: tuple[str | None, str | None] = ("shared", "shared"),
  undeclared: tuple[bool, bool] = (False, False),
) -> list[Verdict]:
  """The one rule's verdict on each pair of an access of `a` and one of
  `b` (`safe`: a declared safe pair covers their targets;
  `across_devices`: the calls run on two different devices of one SPMD
  module, of targets declared `devices`; `undeclared`: per call, whether
  nothing declares its target, which only makes the reasons finer). The
  calls conflict when one verdict says so."""
  return [
    conflict_rule.verdict(
      x.mode,
      y.mode,
      safe=safe,
      evidence=_evidence(x, y, across_devices, undeclared),
      accesses=(x, y),
      devices=devices if across_devices else None,
    )
    for x in a
    for y in b
  ]


def conflict(
  a: tuple[Access, ...], b: tuple[Access, ...], safe: bool = False
) -> bool:
  """Whether calls with accesses `a` and `b` may conflict (`safe`: a
  declared safe pair covers their targets)."""
  return any(v.conflict for v in verdicts(a, b, safe=safe))


def conflict_across_devices(
  a: tuple[Access, ...], b: tuple[Access, ...], safe: bool = False
) -> bool:
  """Whether calls with accesses `a` and `b`, on two different devices of
  one SPMD module, may conflict."""
  return any(v.conflict for v in verdicts(a, b, safe=safe, across_devices=True))


class ConflictMasks:
  """For each call, the mask of the bits of the calls it may conflict with:
  `conflict`, the one rule, precomputed as masks for speed (the two agree
  on every input: ``tests/order/conflicts_test.py``).

  Args:
    accesses: per call, what it accesses.
    bits: per call, its bit positions.

  Calls with equal accesses share one mask: `conflict` is asked once per
  pair of distinct access tuples, which are few (one per object and mode)
  however many calls there are.
  """

  def __init__(self, accesses: list[tuple[Access, ...]], bits: list[list[int]]):
    kinds: dict[tuple[Access, ...], int] = {}
    self._kind = [kinds.setdefault(acc, len(kinds)) for acc in accesses]
    positions: list[list[int]] = [[] for _ in kinds]
    for k, kind in enumerate(self._kind):
      positions[kind].extend(bits[k])
    members = [bitsets.mask_of(p) for p in positions]
    unique = list(kinds)
    self._masks = [0] * len(unique)
    for p, a in enumerate(unique):
      for q in range(p, len(unique)):
        if conflict(a, unique[q]):
          self._masks[p] |= members[q]
          self._masks[q] |= members[p]

  def of(self, k: int) -> int:
    """The bits of the calls that call `k` may conflict with."""
    return self._masks[self._kind[k]]
