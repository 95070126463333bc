"""What each call reads and writes: the conflict model behind ``races``.

Two calls *conflict* when they may touch one object and at least one of
them writes it. What a call does (its mode) is known, first match wins,
from:

1. ``Resource``: a call made inside ``Resource.read`` or
   ``Resource.write`` reads or writes that ``Resource``'s object.
   ``Resource`` records this in the call's ``op_name``
   (`entangle_jax._src.access_marker`), which survives ``jit``, ``scan``,
   ``vmap``, ``shard_map`` and ``jax.export``. A record that JAX copied
   onto a derived op (the backward pass of a ``custom_vjp``, under
   ``transpose(...)``) is not the op's own: such an op may write
   (`entangle_jax._src.access_marker.marks` reads the records).
2. Declarations (`entangle_jax._src.targets.declarations`): a target's mode
   (``"read"``, ``"write"``, or ``"none"``, which touches nothing shared).
3. Nothing: the call may write anything.

Which object a call touches is `entangle_jax.testing._order.objects`'s
question; when two calls conflict, given that, is
`entangle_jax._src.conflict_rule`'s, which ``in_program_order`` asks too.
"""

from __future__ import annotations

import dataclasses

from entangle_jax._src import conflict_rule
from entangle_jax._src.access_marker import Mode, marks
from entangle_jax._src.conflict_rule import Evidence
from entangle_jax._src.targets.declaration import (
  TargetDeclaration,
  pattern_matches,
)
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


def accesses_of(
  op_name: str,
  target: str | None,
  declaration: TargetDeclaration | None,
  read_targets: frozenset[str] | None = None,
  object_ref: objects.ObjectRef | None = None,
) -> tuple[Access, ...]:
  """What a call with this ``op_name`` and custom-call target accesses.

  Args:
    op_name: the call's ``op_name``.
    target: its custom-call target, if it is a custom call.
    declaration: the declaration of `target`, if any.
    read_targets: when given, the targets (names or globs) whose calls
      only read, in place of the declarations' modes.
    object_ref: the object the call's operands name, if known; it goes to
      the innermost access (the ``Resource`` the call was made in).
  """
  found = marks(op_name)
  if found.accesses:
    *outer, inner = found.accesses
    return (
      *(Access(r.resource, r.mode) for r in outer),
      Access(inner.resource, inner.mode, object_ref),
    )
  # Records copied onto a backward op say nothing of it: its declaration
  # decides, else it may write.
  mode = declaration.mode if declaration is not None else "write"
  if read_targets is not None and target is not None:
    listed = any(pattern_matches(r, target) for r in read_targets)
    mode = "read" if listed else ("write" if mode == "read" else mode)
  if mode == "none":
    return ()
  return (Access(None, mode, object_ref),)


def _evidence(x: Access, y: Access, across_devices: bool = False) -> Evidence:
  """What the module shows of the objects of accesses `x` and `y`, for
  the one rule (`entangle_jax._src.conflict_rule`). Made on two different
  devices of one SPMD module, one value is one object only when every
  device holds it alike, and values built to differ on each device are
  different objects (`objects.ObjectRef.same_across_devices`,
  `objects.ObjectRef.distinct_across_devices`)."""
  same = distinct = False
  if x.object is not None and y.object is not None:
    if across_devices:
      same = x.object.same_across_devices(y.object)
      distinct = x.object.distinct_across_devices(y.object)
    else:
      same = x.object.same(y.object)
      distinct = x.object.distinct(y.object)
  return Evidence(same, distinct, (x.resource, y.resource))


def conflict(
  a: tuple[Access, ...], b: tuple[Access, ...], safe: bool = False
) -> bool:
  """Whether calls with accesses `a` and `b` may conflict (`safe`: a
  declared safe pair covers their targets)."""
  return any(
    conflict_rule.conflict(x.mode, y.mode, safe=safe, evidence=_evidence(x, y))
    for x in a
    for y in b
  )


def conflict_across_devices(
  a: tuple[Access, ...], b: tuple[Access, ...], safe: bool = False
) -> bool:
  """Whether calls with accesses `a` and `b`, on two different devices of
  one SPMD module, may conflict."""
  return any(
    conflict_rule.conflict(
      x.mode, y.mode, safe=safe, evidence=_evidence(x, y, across_devices=True)
    )
    for x in a
    for y in b
  )


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
