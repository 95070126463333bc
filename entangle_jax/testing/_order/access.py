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
   ``transpose(...)``) is not the op's own: such an op may write.
2. Declarations (`entangle_jax._src.targets.declarations`): a target's mode
   (``"read"``, ``"write"``, or ``"none"``, which touches nothing shared).
3. Nothing: the call may write anything.

Which object a call touches is `entangle_jax.testing._order.objects`'s
question; when two calls conflict, given that, is
`entangle_jax._src.conflict_rule`'s, which ``in_program_order`` asks too.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from entangle_jax._src import access_marker, conflict_rule
from entangle_jax._src.access_marker import Mode
from entangle_jax._src.conflict_rule import Evidence
from entangle_jax._src.targets.declaration import (
  TargetDeclaration,
  pattern_matches,
)
from entangle_jax.testing._order import bitsets, objects

_WRAPPER = re.compile(r"(vmap|jvp|transpose)\(")
# The scope JAX opens around a forward computation that jax.checkpoint
# recomputes in the backward pass.
_REMATTED = "rematted_computation"


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


def unwrap(component: str) -> str:
  """A scope component without JAX's transformation wrappers.

  JAX writes ``vmap``, ``jvp`` and ``transpose`` around the first component
  opened inside them (``vmap(read)``, ``transpose(jvp(read))``), or as
  ``vmap()`` when there is none.
  """
  return _wrappers(component)[0]


@functools.lru_cache(maxsize=4096)
def _wrappers(component: str) -> tuple[str, tuple[str, ...]]:
  """`component` without its wrappers, and the wrappers, outermost first."""
  found = []
  while component.endswith(")") and (match := _WRAPPER.match(component)):
    found.append(match.group(1))
    component = component[match.end() : -1]
  return component, tuple(found)


@dataclasses.dataclass(frozen=True)
class Marks:
  """The ``Resource`` records in one ``op_name``.

  Attributes:
    accesses: the records that are the op's own, outermost first.
    inherited: records JAX copied from the forward pass onto a backward
      op: every record at or inside the first component wrapped in
      ``transpose(...)``. JAX wraps only the first component of the
      forward call's scopes, so a record the backward rule opened itself
      cannot be told apart from a copied one there; neither counts.
  """

  accesses: tuple[Access, ...] = ()
  inherited: tuple[Access, ...] = ()

  @property
  def backward(self) -> bool:
    """Whether the op is a backward-pass op under a ``Resource`` record."""
    return bool(self.inherited)


_NO_MARKS = Marks()


@functools.lru_cache(maxsize=4096)
def marks(op_name: str) -> Marks:
  """The ``Resource`` records of `op_name` (`Marks`).

  A forward call that ``jax.checkpoint`` recomputes in the backward pass
  is the forward call again: JAX writes ``rematted_computation`` after the
  transposed component (``transpose(jvp(entangle_jax:read:ps))/
  jvp(entangle_jax:read:ps)/checkpoint/rematted_computation/ffi_call``;
  jax 0.6.2 without the second copy of the forward scopes), and the
  records of the forward scopes are its own.
  """
  if access_marker.PREFIX not in op_name:
    return _NO_MARKS
  components = [_wrappers(c) for c in op_name.split("/")]
  first = next(
    (k for k, (_, w) in enumerate(components) if "transpose" in w), None
  )
  rematted = first is not None and any(
    inner == _REMATTED for inner, _ in components[first + 1 :]
  )
  own: list[Access] = []
  inherited: list[Access] = []
  recomputed: list[tuple[int, Access]] = []
  for k, (inner, _) in enumerate(components):
    parsed = access_marker.parse_component(inner)
    if parsed is None:
      continue
    mode, name = parsed
    if first is None or k < first:
      own.append(Access(name, mode))
    elif rematted:
      recomputed.append((k, Access(name, mode)))
    else:
      inherited.append(Access(name, mode))
  if recomputed:
    # jax 0.10 and 0.12 write the forward scopes again after the
    # transposed component; jax 0.6.2 only inside it.
    assert first is not None  # Set whenever something is recomputed.
    later = [a for k, a in recomputed if k > first]
    own += later or [a for _, a in recomputed]
  if not own and not inherited:
    return _NO_MARKS
  return Marks(tuple(own), tuple(inherited))


def has_marks(op_name: str) -> bool:
  """Whether `op_name` holds any ``Resource`` record, own or copied."""
  return marks(op_name) is not _NO_MARKS


@functools.lru_cache(maxsize=4096)
def without_markers(op_name: str) -> str:
  """`op_name` without the components that record ``Resource`` accesses;
  a wrapped record keeps its wrappers (``transpose(jvp())``), so a
  backward-pass op still says so."""
  if access_marker.PREFIX not in op_name:
    return op_name
  kept = []
  for component in op_name.split("/"):
    inner, wrappers = _wrappers(component)
    if access_marker.parse_component(inner) is None:
      kept.append(component)
    elif wrappers:
      kept.append("".join(f"{w}(" for w in wrappers) + ")" * len(wrappers))
  return "/".join(kept)


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
    return (*outer, Access(inner.resource, inner.mode, object_ref))
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
