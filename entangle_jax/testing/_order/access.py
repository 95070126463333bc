"""What each call reads and writes: the conflict model behind ``races``.

Two calls *conflict* when they may touch one resource and at least one of
them writes it. What a call accesses is known, first match wins, from:

1. ``Resource``: a call made inside ``Resource.read`` or
   ``Resource.write`` reads or writes that ``Resource``'s resource (any
   resource, for a ``Resource`` without a name). ``Resource`` records this
   in the call's ``op_name`` (`entangle_jax._src.access_marker`), which
   survives ``jit``, ``scan``, ``vmap``, ``shard_map`` and ``jax.export``.
2. `declare_target_mode`: a call to a custom-call target declared
   ``"read"`` reads any resource.
3. Nothing: the call may write any resource.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from entangle_jax._src import access_marker
from entangle_jax._src.access_marker import MODES, Mode
from entangle_jax.testing._order import bitsets

_WRAPPER = re.compile(r"(?:vmap|jvp|transpose)\(")

_declared_reads: set[str] = set()


@dataclasses.dataclass(frozen=True, order=True)
class Access:
  """One access of a call: its resource (None: may be any) and mode."""

  resource: str | None
  mode: Mode

  def __str__(self) -> str:
    where = "any resource" if self.resource is None else repr(self.resource)
    return f"{'reads' if self.mode == 'read' else 'writes'} {where}"


UNKNOWN = (Access(None, "write"),)
"""What a call accesses when nothing says otherwise."""


def declare_target_mode(target: str, mode: Mode) -> None:
  """Declares whether calls to custom-call target `target` only read.

  ``races`` and ``order_graph`` count a call to a target declared
  ``"read"`` as reading (any resource): two such calls never conflict, and
  one conflicts with every call that may write. A target never declared,
  or declared ``"write"`` (which undoes ``"read"``), may write any
  resource. Calls made through ``Resource.read`` and ``Resource.write``
  have their method's mode instead. The declaration holds for the whole
  process, like the FFI registration of the target it describes. Loading
  the example store (``entangle_jax.testing.example_store``, which the
  first use of ``entangle_jax.testing.write_slot`` or its siblings does)
  declares its ``entangle_jax_read_slot`` a read.

  Raises:
    TypeError: `target` is not a str.
    ValueError: `target` is empty, or `mode` is not ``"read"`` or
      ``"write"``.
  """
  if not isinstance(target, str):
    raise TypeError(f"target must be a str, not {type(target).__name__}")
  if not target:
    raise ValueError("target must not be empty")
  if mode not in MODES:
    raise ValueError(f"mode must be 'read' or 'write', not {mode!r}")
  if mode == "read":
    _declared_reads.add(target)
  else:
    _declared_reads.discard(target)


def declared_read_targets() -> frozenset[str]:
  """The targets `declare_target_mode` has declared ``"read"``, now."""
  return frozenset(_declared_reads)


def unwrap(component: str) -> str:
  """A scope component without JAX's transformation wrappers.

  JAX writes ``vmap``, ``jvp`` and ``transpose`` around the first component
  opened inside them (``vmap(read)``, ``transpose(jvp(read))``), or as
  ``vmap()`` when there is none.
  """
  while component.endswith(")") and (match := _WRAPPER.match(component)):
    component = component[match.end() : -1]
  return component


@functools.lru_cache(maxsize=4096)
def marked_accesses(op_name: str) -> tuple[Access, ...]:
  """The ``Resource`` accesses recorded in `op_name`, outermost first."""
  if access_marker.PREFIX not in op_name:
    return ()
  found = []
  for component in op_name.split("/"):
    parsed = access_marker.parse_component(unwrap(component))
    if parsed is not None:
      mode, name = parsed
      found.append(Access(name, mode))
  return tuple(found)


@functools.lru_cache(maxsize=4096)
def without_markers(op_name: str) -> str:
  """`op_name` without the components that record ``Resource`` accesses."""
  if access_marker.PREFIX not in op_name:
    return op_name
  return "/".join(
    c
    for c in op_name.split("/")
    if access_marker.parse_component(unwrap(c)) is None
  )


def accesses_of(
  op_name: str, target: str | None, read_targets: frozenset[str]
) -> tuple[Access, ...]:
  """What a call with this ``op_name`` and custom-call target accesses,
  when the calls to `read_targets` only read."""
  marked = marked_accesses(op_name)
  if marked:
    return marked
  if target is not None and target in read_targets:
    return (Access(None, "read"),)
  return UNKNOWN


def conflict(a: tuple[Access, ...], b: tuple[Access, ...]) -> bool:
  """Whether calls with accesses `a` and `b` may conflict."""
  return any(
    (x.resource is None or y.resource is None or x.resource == y.resource)
    and "write" in (x.mode, y.mode)
    for x in a
    for y in b
  )


class ConflictMasks:
  """For each call, the mask of the bits of the calls it may conflict with:
  `conflict`, the one rule, precomputed as masks for speed (the two agree
  on every input: ``tests/analysis/conflicts_test.py``).

  Args:
    accesses: per call, what it accesses.
    bits: per call, its bit positions.

  Built in time linear in the number of bits, times the number of named
  resources; `of` then ORs one or two masks per access.
  """

  def __init__(self, accesses: list[tuple[Access, ...]], bits: list[list[int]]):
    named = sorted({a.resource for acc in accesses for a in acc if a.resource})
    # (resource or None for every call, "write" or None for any mode).
    members: dict[tuple[str | None, str | None], list[int]] = {}
    for k, acc in enumerate(accesses):
      # (None, None): every call that accesses anything; a call that
      # accesses nothing conflicts with none, as `conflict` says.
      keys: set[tuple[str | None, str | None]] = (
        {(None, None)} if acc else set()
      )
      for a in acc:
        resources = named if a.resource is None else [a.resource]
        writes = a.mode == "write"
        if writes:
          keys.add((None, "write"))
        for r in resources:
          keys.add((r, None))
          if writes:
            keys.add((r, "write"))
      for key in keys:
        members.setdefault(key, []).extend(bits[k])
    self._masks = {key: bitsets.mask_of(p) for key, p in members.items()}
    self._accesses = accesses

  def of(self, k: int) -> int:
    """The bits of the calls that call `k` may conflict with."""
    mask = 0
    for a in self._accesses[k]:
      mode = None if a.mode == "write" else "write"
      mask |= self._masks.get((a.resource, mode), 0)
    return mask
