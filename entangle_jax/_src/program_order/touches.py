"""What a native call touches, and when two calls conflict: the objects
calls name (constants, values, elements of a handle array, named
``Resource`` objects), the parts of a call, and the calls recorded so far.
When two calls conflict, given what is known of their objects, is the
rule the race check applies too (`entangle_jax._src.conflict_rule`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax.core import Tracer

from entangle_jax._src import access_policy, conflict_rule
from entangle_jax._src.conflict_rule import Evidence
from entangle_jax._src.targets.declaration import Declarations


@dataclasses.dataclass(frozen=True)
class Obj:
  """What names the object a call touches: `consts` when its operand is a
  constant (the integers it holds), else `key` (the id of its root value)
  and, for part of that value (``handles[3]``), `elements`: the flat
  indices into it. `array` and `index` are the constant, and the indices,
  in the operand's shape, for following further views."""

  consts: frozenset | None = None
  key: int | None = None
  elements: frozenset | None = None
  array: Any = dataclasses.field(default=None, compare=False)
  index: Any = dataclasses.field(default=None, compare=False)
  resource: str | None = None  # A named Resource's name.

  def evidence(self, other: Obj, elements_distinct: bool) -> Evidence:
    """What is known of whether the two are one object, for the one rule
    (`entangle_jax._src.conflict_rule`): one value (`same_value`);
    different constants, or different elements of one value where
    `elements_distinct` (both calls' declarations say so); and the
    ``Resource`` names."""
    distinct = False
    if self.consts is not None and other.consts is not None:
      distinct = conflict_rule.distinct_constants(self.consts, other.consts)
    elif (
      self.key is not None
      and self.key == other.key
      and self.elements is not None
      and other.elements is not None
    ):
      distinct = conflict_rule.disjoint_elements(
        self.elements, other.elements, declared=elements_distinct
      )
    return Evidence(
      same=self.same_value(other),
      distinct=distinct,
      names=(self.resource, other.resource),
    )

  def same_value(self, other: Obj) -> bool:
    """Whether both are one value (one token), or overlapping constants."""
    if self.consts is not None and other.consts is not None:
      return bool(self.consts & other.consts)
    if self.key is None or self.key != other.key:
      return False
    if self.elements is not None and other.elements is not None:
      return bool(self.elements & other.elements)
    return True


@dataclasses.dataclass(frozen=True)
class Part:
  mode: str  # "read" or "write"
  obj: Obj | None  # None: anything
  target: str


@dataclasses.dataclass
class OrderedCall:
  """A native call (or a summary of several, for a loop or a branch)."""

  bit: int
  parts: tuple[Part, ...]
  witnesses: list[Any]
  deps: int  # The accesses this one is ordered after, itself included.
  label: str
  side_effect: bool = True
  results: tuple[Any, ...] = ()
  tokens: frozenset = frozenset()
  """The ordered effects it has: JAX threads one token per effect through
  the calls that have it, in program order (`Context.native`)."""

  @functools.cached_property
  def position(self) -> int:
    """The index of its `bit`."""
    return self.bit.bit_length() - 1

  @functools.cached_property
  def only_reads(self) -> bool:
    return only_reads(self.parts)

  @functools.cached_property
  def constants(self) -> frozenset | None:
    return constants_of(self.parts)


def only_reads(parts: Sequence[Part]) -> bool:
  """Whether every part reads: two such calls never conflict (rule 1)."""
  return all(p.mode == "read" for p in parts)


def constants_of(parts: Sequence[Part]) -> frozenset | None:
  """The integers of the constant handles `parts` name, when every part
  names constants (else None). Two calls whose parts all name constants,
  none in both, touch different objects: they never conflict, whatever
  else is known (rule 3). A quick test before `conflicts`."""
  found: set = set()
  for p in parts:
    if p.obj is None or p.obj.consts is None:
      return None
    found |= p.obj.consts
  return frozenset(found)


def may_conflict(
  access: OrderedCall,
  parts: Sequence[Part],
  reads: bool,
  consts: frozenset | None,
) -> bool:
  """False where `access` cannot conflict with a call of `parts` (whose
  `only_reads` and `constants_of` are `reads` and `consts`) by the quick
  tests; True where `conflicts` must decide."""
  if reads and access.only_reads:
    return False
  if consts is not None:
    theirs = access.constants
    if theirs is not None and not (theirs & consts):
      return False
  return True


def covers(
  later: Sequence[Part], earlier: Sequence[Part], decls: Declarations
) -> bool:
  """Whether every call that conflicts with `earlier` conflicts with
  `later` (which writes what `earlier` touches, or an object that nothing
  tells apart from any other: `shares_with_all`). Without a declared safe
  pair (the caller's condition): a safe pair could free a call from
  `later` and not from `earlier`."""
  writes = [p for p in later if p.mode == "write"]
  if any(shares_with_all(w, decls) for w in writes):
    return True
  return all(any(_same_object(w, e) for w in writes) for e in earlier)


def _same_object(w: Part, e: Part) -> bool:
  """Whether every object that may share with `e`'s may share with `w`'s:
  one object, known alike. The targets matter only for elements of a
  handle array, which each target's declaration may call distinct; a
  constant, or a whole value, is told apart by what it is alone (so a
  write on slot 3 covers the reads of slot 3 before it)."""
  if w.obj is None:
    return True
  if w.obj != e.obj:
    return False
  return w.target == e.target or w.obj.elements is None


def shares_with_all(part: Part, decls: Declarations) -> bool:
  """Whether no evidence can tell `part`'s object apart from any other's
  (rule 3 says it may share with every object): it names anything, or a
  traced value (or an element of one) under no ``Resource`` name, whose
  target does not declare different elements different objects. Only
  constants, elements declared distinct and names are evidence of
  different objects, and it has none of them. A write of such a part
  conflicts with every call, so every later call that conflicts with an
  earlier one it comes after is ordered by it (`covers`): with handles
  taken from a traced array (``slots[k % 64]``), each write leaves one
  call to ask about where the calls before it were all kept and asked
  again (a quadratic trace)."""
  obj = part.obj
  if obj is None:
    return True
  if obj.consts is not None or obj.resource is not None:
    return False
  return obj.elements is None or not access_policy.distinct_elements_of(
    decls, part.target
  )


def conflicts(
  a: Sequence[Part], b: Sequence[Part], decls: Declarations
) -> bool:
  return any(_part_conflict(x, y, decls) for x in a for y in b)


def _part_conflict(x: Part, y: Part, decls: Declarations) -> bool:
  safe = access_policy.safe_pair(decls, x.target, y.target) is not None
  if x.obj is None or y.obj is None:
    evidence = Evidence()  # Anything: it may be any object.
  else:
    distinct = access_policy.distinct_elements_of(
      decls, x.target
    ) and access_policy.distinct_elements_of(decls, y.target)
    evidence = x.obj.evidence(y.obj, distinct)
  return conflict_rule.conflict(x.mode, y.mode, safe=safe, evidence=evidence)


def comes_after(bits: int, call: OrderedCall) -> bool:
  """Whether `call`'s bit is among `bits` (a set of calls as an int): a
  shift from its position, so that the test costs the bits above it, a
  few words for a recent call, where ``bits & call.bit`` costs all of
  them, as many as the calls made so far."""
  return bool((bits >> call.position) & 1)


ANY = (Part("write", None, "any"),)


def constant_array(value) -> np.ndarray | None:
  """`value` as a NumPy array, when it is a known integer array (a
  literal, a constant of the traced program) of at most 4096 elements."""
  if isinstance(value, Tracer):
    return None
  try:
    array = np.asarray(value)
  except Exception:  # Anything not concrete.
    return None
  if array.dtype.kind not in "iu" or array.size > 4096:
    return None
  return array


VIEWS = (
  "slice",
  "squeeze",
  "reshape",
  "convert_element_type",
  "copy",
  "copy_p",
)


def apply_view(eqn, array: np.ndarray) -> np.ndarray | None:
  """What `eqn` (one of `VIEWS`) makes of `array`'s elements, or None."""
  name, params = eqn.primitive.name, eqn.params
  try:
    if name == "slice":
      strides = params.get("strides") or (1,) * array.ndim
      return array[
        tuple(
          slice(a, b, c)
          for a, b, c in zip(
            params["start_indices"],
            params["limit_indices"],
            strides,
            strict=True,
          )
        )
      ]
    if name == "squeeze":
      return np.squeeze(array, tuple(params["dimensions"]))
    if name == "reshape":
      # `dimensions`: the order in which the operand's elements are read
      # (``jnp.ravel(order="F")``), a transpose before the reshape.
      dimensions = params.get("dimensions")
      if dimensions is not None:
        array = np.transpose(array, tuple(dimensions))
      return array.reshape(params["new_sizes"])
    if name == "convert_element_type":
      # Only to an integer type that holds every value: a narrowing one
      # could make two handles one.
      new = np.dtype(params["new_dtype"])
      if new.kind not in "iu" or not np.can_cast(array.dtype, new):
        return None
      return array.astype(new)
    return array
  except Exception:  # A view this does not follow: nothing is claimed.
    return None
