"""When two native calls conflict: the one rule of entangle-jax.

The race check (`entangle_jax.testing._order.access`), `in_program_order`
(`entangle_jax._src.program_order.touches`) and the run-time sanitizer
each find what is known of two calls in their own terms (HLO values,
traced values, handles seen at run time) and ask this module what it
means. So a call pair the check calls a race is one the transform orders,
and one the transform leaves free is one the check passes.

Two calls *conflict* when all of these hold:

1. one of them writes (reads of one object may run at once);
2. no declared safe pair covers their two targets (the user's word that
   the two never touch one object);
3. they may touch one object (`may_share`): provably one object, they
   may; with evidence of different objects (`Evidence`), they may not;
   else two different ``Resource`` names (the user's word again) tell
   them apart, and without any of these they may be one.

What counts as evidence of different objects is also stated here, once:
different integer constants (`distinct_constants`), and different
elements of one array where both calls' declarations say its elements are
different objects (`disjoint_elements`).

The answer is a `Verdict`: whether they conflict, and why (`Reason`), with
the modes, the evidence and the accesses it was asked about. A reason says
which rule decided and, where two calls may be one object, what leaves
them so (a call that names no object, elements nothing declares distinct,
handles nothing tells apart), so what a report says of a pair (its cause,
the sanitizer's agreement line) reads the verdict's reason rather than
asking the question again, and finds each reason's words in one table
(`entangle_jax._src.reason_words`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection
from typing import Any, Literal

Mode = Literal["read", "write"]


@dataclasses.dataclass(frozen=True)
class Evidence:
  """What is known of the objects two calls touch.

  Attributes:
    same: the two provably touch one object (one value, followed back
      through what passes a handle on unchanged).
    distinct: there is evidence that they touch different objects
      (`distinct_constants`, `disjoint_elements`).
    names: the names of the ``Resource`` objects the calls were made
      through (None: none, or an unnamed one).
  """

  same: bool = False
  distinct: bool = False
  names: tuple[str | None, str | None] = (None, None)
  anything: tuple[bool, bool] = (False, False)
  """Per call, whether nothing names its object: it may touch any."""
  elements: bool = False
  """The two are different elements of one array of handles (or shards of
  one split array): only a ``distinct_elements`` declaration tells them
  apart, and `distinct` says whether one does."""
  undeclared: tuple[bool, bool] = (False, False)
  """Per call, whether nothing declares what its target does: where
  nothing names its object either (`anything`), it may write any object."""


class Reason(enum.Enum):
  """What decided a `Verdict`, first match wins (rules 1 to 3). The last
  four are why two calls may touch one object (rule 3 leaves them
  conflicting), the most telling first."""

  READS = "both only read"
  PER_DEVICE = "on two devices, a per-device target touches two objects"
  SAFE_PAIR = "a declared safe pair covers their targets"
  SAME_OBJECT = "they provably touch one object"
  DISTINCT_ELEMENTS = (
    "they are different elements of one array declared distinct"
  )
  DISTINCT_HANDLES = (
    "they hold different constant handles, or one value built to differ "
    "on each device"
  )
  DIFFERENT_NAMES = "they were made under two different Resource names"
  UNDECLARED = "a call nothing declares names no object: it may write any"
  NO_OBJECT = (
    "a call names no object (declared with none, or an unnamed "
    "Resource's): it may touch any"
  )
  ELEMENTS_NOT_DISTINCT = (
    "different elements of one array, which nothing declares distinct"
  )
  HANDLES_MAY_BE_ONE = "nothing says their handles differ"


@dataclasses.dataclass(frozen=True)
class Verdict:
  """Whether two calls conflict, and why.

  Attributes:
    conflict: whether they conflict.
    reason: what decided it.
    modes: what each does to its object.
    evidence: what was known of their objects.
    accesses: the two accesses asked about, in the asking stage's terms
      (None where it gave none).
  """

  conflict: bool
  reason: Reason
  modes: tuple[str, str]
  evidence: Evidence
  accesses: tuple[Any, Any] | None = None


def modes_conflict(a: str, b: str) -> bool:
  """Rule 1: whether accesses of modes `a` and `b` conflict on one object
  (one of them writes)."""
  return "write" in (a, b)


def may_share(evidence: Evidence) -> bool:
  """Rule 3: whether two calls may touch one object, by `evidence`.

  Proof of one object wins over everything, ``Resource`` names included
  (two names given to one handle are still one object); then evidence of
  different objects; then different names; else they may be one.
  """
  if evidence.same:
    return True
  if evidence.distinct:
    return False
  a, b = evidence.names
  return a is None or b is None or a == b


def _decided(
  mode_a: str,
  mode_b: str,
  safe: bool,
  evidence: Evidence,
  devices: tuple[str | None, str | None] | None,
) -> Reason | None:
  """Rules 1 to 3, and the device rule: what decides, first match wins;
  None where nothing tells the two calls' objects apart (they may be one:
  `_why_maybe_one` says why)."""
  if not modes_conflict(mode_a, mode_b):
    return Reason.READS
  if devices is not None and not all(map(shared_across_devices, devices)):
    return Reason.PER_DEVICE
  if safe:
    return Reason.SAFE_PAIR
  if evidence.same:
    return Reason.SAME_OBJECT
  if evidence.distinct:
    if evidence.elements:
      return Reason.DISTINCT_ELEMENTS
    return Reason.DISTINCT_HANDLES
  return None if may_share(evidence) else Reason.DIFFERENT_NAMES


def _why_maybe_one(evidence: Evidence) -> Reason:
  """Why two calls that nothing tells apart may touch one object, the
  most telling first: a call nothing declares and that names no object;
  a call that names none (it touches anything its library holds);
  different elements of one array (only a declaration tells them apart);
  else handles that nothing says differ. (A call that names no object
  takes no element: the last two never meet the first two.)"""
  anything, undeclared = evidence.anything, evidence.undeclared
  if (anything[0] and undeclared[0]) or (anything[1] and undeclared[1]):
    return Reason.UNDECLARED
  if anything[0] or anything[1]:
    return Reason.NO_OBJECT
  if evidence.elements:
    return Reason.ELEMENTS_NOT_DISTINCT
  return Reason.HANDLES_MAY_BE_ONE


_CONFLICTING = frozenset(
  {
    Reason.SAME_OBJECT,
    Reason.UNDECLARED,
    Reason.NO_OBJECT,
    Reason.ELEMENTS_NOT_DISTINCT,
    Reason.HANDLES_MAY_BE_ONE,
  }
)
"""The reasons that make two calls conflict: one object, or nothing that
tells their objects apart (`_why_maybe_one`)."""


def verdict(
  mode_a: str,
  mode_b: str,
  *,
  safe: bool,
  evidence: Evidence,
  accesses: tuple[Any, Any] | None = None,
  devices: tuple[str | None, str | None] | None = None,
) -> Verdict:
  """Rules 1 to 3: whether two calls conflict, and why.

  Args:
    mode_a: what the first call does to its object (``"read"``,
      ``"write"``).
    mode_b: what the second one does.
    safe: whether a declared safe pair covers their targets.
    evidence: what is known of their objects.
    accesses: the two accesses, for the verdict to carry.
    devices: for two calls on two different devices of one SPMD module,
      their targets' declared ``devices`` (`shared_across_devices`); None
      for two calls on one device.
  """
  reason = _decided(mode_a, mode_b, safe, evidence, devices)
  if reason is None:
    reason = _why_maybe_one(evidence)
  return Verdict(
    reason in _CONFLICTING, reason, (mode_a, mode_b), evidence, accesses
  )


def conflict(
  mode_a: str, mode_b: str, *, safe: bool, evidence: Evidence
) -> bool:
  """Whether two calls on one device conflict: `verdict`'s answer alone
  (its rule, without building the verdict or saying why two calls may be
  one object: ``in_program_order`` asks this for every pair its quick
  tests leave)."""
  reason = _decided(mode_a, mode_b, safe, evidence, None)
  return reason is None or reason in _CONFLICTING


def distinct_constants(a: Collection[int], b: Collection[int]) -> bool:
  """Whether constant handles `a` and `b` (the integers each call's object
  operand holds) are evidence of different objects: no integer in both."""
  return not set(a) & set(b)


def disjoint_elements(
  a: Collection[int], b: Collection[int], *, declared: bool
) -> bool:
  """Whether two calls on elements `a` and `b` of one array of handles
  (flat indices) touch different objects: only where both calls'
  declarations say different elements are different objects
  (`declared`), and no element is in both."""
  return declared and not set(a) & set(b)


def shared_across_devices(devices: str | None) -> bool:
  """Whether a call's copies on the devices of one SPMD module may touch
  one object, by its target's declared ``devices`` (None: nothing is
  declared, so it may touch process-wide state): unless each device has
  its own (``"per-device"``). Nothing in one SPMD program orders the
  copies on two devices, so two that conflict race."""
  return devices is None or devices == "shared"


APART_REASON = (
  "on devices of different processes, which share no process-wide state "
  "(Python, a host library's globals): each process has its own"
)
"""Why copies of one call on two devices of an SPMD module do not race on
a target shared across devices when each device is in a process of its
own (``jax.distributed``): the reason reports give for the pairs the
device rule leaves out then."""
