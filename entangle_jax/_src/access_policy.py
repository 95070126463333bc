"""What a native call touches: the one access policy of entangle-jax.

The race check (HLO custom calls), ``in_program_order`` (jaxpr equations
and the custom calls of a primitive's lowering) and the run-time sanitizer
(calls as they ran) each describe a call in their own terms, and ask
`footprint` what it touches. Each hands in what it knows of each operand,
its *provenance*: the HLO value a handle comes from (the race check's
`ObjectRef`), the input of the equation that carries it
(``in_program_order``), or the integers the operand held at run time (the
sanitizer). The policy picks which operand names the object; the stage's
provenance of that operand is the object. When two footprints conflict
is `entangle_jax._src.conflict_rule`'s question.

What a call does, first match wins:

1. A host callback that is not side-effecting (``pure_callback``) touches
   nothing: JAX's contract makes it pure (`names.is_pure_host_callback`).
2. A call made inside ``Resource.read`` or ``Resource.write`` reads or
   writes that ``Resource``'s object, by the records in its ``op_name``
   (`access_marker.marks`); a record JAX copied onto a backward-pass op is
   not the op's own.
3. The target's declaration (`Declarations.for_target`, asked here and
   nowhere else): its mode, ``"none"`` touching nothing. Host callbacks are
   one declaration among the others (`sources.BUILT_IN`: they may write
   anything, shared by every device), so a project's declaration of a
   host-callback target applies in every stage, the TPU's host transfers
   (`names.TPU_HOST_CALLBACK_TARGET`) included.
4. Nothing: the call may write anything.

Which operand names the object: the declared ``object`` operand; else,
inside a ``Resource``, its first operand (``Resource`` hands the call its
token there); else none, and the call may touch any object (the whole
library, or anything where nothing is declared).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Generic, TypeVar

from entangle_jax._src import access_marker
from entangle_jax._src.access_marker import Record
from entangle_jax._src.targets.communication import Communication
from entangle_jax._src.targets.declaration import (
  Declarations,
  PythonArgument,
  SafePair,
  TargetDeclaration,
  TargetMode,
  pattern_matches,
)
from entangle_jax._src.targets.names import is_pure_host_callback

P = TypeVar("P")
"""A stage's provenance of an operand (what it knows of the value)."""


class AnyObject(enum.Enum):
  """Why a call may touch any object (its `Footprint.object` is None)."""

  UNDECLARED = "a target nobody declared may write anything"
  WHOLE_LIBRARY = "declared with no object operand: the whole library"
  NOT_KNOWN = "its object operand is not known to the stage"


@dataclasses.dataclass(frozen=True)
class Footprint(Generic[P]):
  """What one call touches, and how.

  Attributes:
    mode: ``"read"``, ``"write"``, or ``"none"`` (touches nothing another
      call can see).
    records: the ``Resource`` records the call was made in, its own,
      outermost first (the innermost decides `mode` and names the object);
      () outside any ``Resource``.
    operand: the operand that names the object it touches (or would, for
      a call that touches nothing); None: none.
    object: the stage's provenance of that operand; None: any object
      (`any_object` says why), or nothing.
    returns_object: the results that hand back the object, for later
      calls; None: every result (a ``Resource`` write's result is its next
      token).
    declaration: the declaration that applied, if any, for reports to
      name; what it decides is in the fields below, which no stage reads
      from it again.
    any_object: why `object` is None, when the call touches something.
    declared_object: whether a declaration names `operand` (else it is a
      ``Resource``'s token, or there is none).
    devices: the declaration's ``devices`` (None: not said), for
      `conflict_rule.shared_across_devices`.
    distinct_elements: whether different elements of an array of handles
      in `operand` are different objects (the declaration's say, else the
      project's).
    argument: the Python argument that carries the object, for a fix's
      words (the declaration's ``argument``), or None.
    communicates: how the call talks to other ranks (the declaration's
      ``communicates``), or None: it does not.
  """

  mode: TargetMode
  records: tuple[Record, ...] = ()
  operand: int | None = None
  object: P | None = None
  returns_object: tuple[int, ...] | None = ()
  declaration: TargetDeclaration | None = None
  any_object: AnyObject | None = None
  declared_object: bool = False
  devices: str | None = None
  distinct_elements: bool = False
  argument: PythonArgument | None = None
  communicates: Communication | None = None

  @property
  def touches_nothing(self) -> bool:
    """Whether the call touches nothing another call can see."""
    return self.mode == "none"


def object_operand(
  declaration: TargetDeclaration | None, op_name: str, operands: int
) -> int | None:
  """The operand of a call (with `operands` operands) that names its
  object: the declared one (even past `operands`: `check_object_operand`
  rejects it where the stage can count them), else a ``Resource``'s token
  (operand 0), else None."""
  if declaration is not None and declaration.object is not None:
    return declaration.object
  if operands and access_marker.has_marks(op_name):
    return 0  # Resource passes the token first.
  return None


def check_object_operand(found: Footprint, operands: int, call: str) -> None:
  """Raises unless the call (`call`, in words) with `operands` operands has
  the object operand its declaration names: a declaration that names an
  operand the call lacks is wrong for it, and every stage that can count
  a call's operands says so (the sanitizer cannot: it records only that
  operand).

  Raises:
    ValueError: naming the declaration, the operand and the call.
  """
  if found.operand is not None and found.operand >= operands:
    raise ValueError(
      f"the declaration {found.declaration} names operand "
      f"{found.operand}, but {call} has {operands} operands"
    )


def _returned(
  declaration: TargetDeclaration | None, own: tuple[Record, ...]
) -> tuple[int, ...] | None:
  """The results that hand back the object (None: all of them)."""
  if declaration is not None and declaration.object is not None:
    return declaration.returns_object
  if own and own[-1].mode == "write":
    return None  # A Resource write returns the next token.
  return ()


def footprint(
  target: str | None,
  declarations: Declarations,
  *,
  operands: Sequence[P | None] = (),
  op_name: str = "",
  side_effect: bool = True,
  host_callback: bool | None = None,
  read_targets: frozenset[str] | None = None,
) -> Footprint[P]:
  """What a call of `target` touches (see the module).

  Args:
    target: the call's target (None: an op that is no custom call).
    declarations: the declarations in effect.
    operands: per operand, what the stage knows of it (None: nothing); a
      lazy sequence is read only at the object operand.
    op_name: the call's named scopes, where the stage sees them (its
      ``Resource`` records).
    side_effect: whether the call is side-effecting (a host callback that
      is not is ``pure_callback``'s).
    host_callback: whether the call is a host callback, where the stage
      knows it otherwise than by its target (the sanitizer's recorder);
      None: by its target (`names.is_host_callback`).
    read_targets: when given, the targets (names or globs) whose calls
      only read, in place of the declarations' modes (``races``'s
      ``read_targets``).
  """
  if host_callback is None:
    pure = target is not None and is_pure_host_callback(target, side_effect)
  else:
    pure = host_callback and not side_effect
  if pure:
    return _NOTHING
  declaration = declarations.for_target(target)
  own = own_records(op_name)
  if own:
    mode: TargetMode = own[-1].mode
  else:
    # Records copied onto a backward op say nothing of it: its declaration
    # decides, else it may write.
    mode = declaration.mode if declaration is not None else "write"
    if read_targets is not None and target is not None:
      listed = any(pattern_matches(r, target) for r in read_targets)
      mode = "read" if listed else ("write" if mode == "read" else mode)
  operand = object_operand(declaration, op_name, len(operands))
  returned = _returned(declaration, own)
  said = _declared(declaration, declarations)
  if mode == "none":
    # Its object operand and results still say where a handle goes: a
    # call that touches nothing may hand its handle back.
    return Footprint(
      "none", own, operand, None, returned, declaration, None, **said
    )
  if operand is not None and operand < len(operands):
    found = operands[operand]
  else:
    found = None
  why = None
  if found is None:
    if operand is not None:
      why = AnyObject.NOT_KNOWN
    elif declaration is None:
      why = AnyObject.UNDECLARED
    else:
      why = AnyObject.WHOLE_LIBRARY
  return Footprint(
    mode,
    own,
    operand,
    found,
    returned,
    declaration,
    why,
    **said,
  )


def _declared(
  declaration: TargetDeclaration | None, declarations: Declarations
) -> dict:
  """The fields of a `Footprint` that its declaration decides."""
  if declaration is None:
    return {"distinct_elements": declarations.distinct_for(None)}
  return {
    "declared_object": declaration.object is not None,
    "devices": declaration.devices,
    "distinct_elements": declarations.distinct_for(declaration),
    "argument": declaration.argument,
    "communicates": declaration.communicates,
  }


_NOTHING: Footprint = Footprint("none")


def safe_pair(
  declarations: Declarations, a: str | None, b: str | None
) -> SafePair | None:
  """The declared safe pair that excuses calls of targets `a` and `b`
  from conflicting, if any (every stage asks here)."""
  return declarations.safe(a, b)


def own_records(scopes: str) -> tuple[Record, ...]:
  """The ``Resource`` records of a call's own in its named scopes
  `scopes` (an ``op_name``, or a name stack), outermost first: those
  `footprint` applies (rule 2)."""
  return access_marker.marks(scopes).accesses if scopes else ()


def is_backward_copy(op_name: str) -> bool:
  """Whether an op's ``Resource`` records were copied onto it by JAX's
  transpose (a backward-pass op), and so are not its own."""
  return access_marker.marks(op_name).backward


def counts_as_native_call(target: str, side_effect: bool) -> bool:
  """Whether a custom call of `target` is one of the program's native
  calls at all: every one but a host callback that is not side-effecting
  (``pure_callback``'s, rule 1)."""
  return not is_pure_host_callback(target, side_effect)


def distinct_elements_of(declarations: Declarations, target: str) -> bool:
  """Whether different elements of one array of handles are different
  objects for the calls of `target` (its declaration's say, else the
  project's)."""
  return declarations.distinct_for(declarations.for_target(target))


@dataclasses.dataclass(frozen=True)
class DeviceScope:
  """What `target`'s declaration says of its calls on several devices.

  Attributes:
    declared: whether any declaration applies to the target.
    devices: the declaration's ``devices`` key (None: not said), which
      `conflict_rule.shared_across_devices` reads.
    distinct_elements: `distinct_elements_of` for the target.
  """

  declared: bool
  devices: str | None
  distinct_elements: bool


def device_scope(declarations: Declarations, target: str) -> DeviceScope:
  """`DeviceScope` of the calls of `target`, by its declaration."""
  declaration = declarations.for_target(target)
  return DeviceScope(
    declared=declaration is not None,
    devices=None if declaration is None else declaration.devices,
    distinct_elements=declarations.distinct_for(declaration),
  )


def is_declared(declarations: Declarations, target: str) -> bool:
  """Whether any declaration describes the calls of `target` (the
  cross-rank check compares an undeclared native call as one that may
  communicate)."""
  return declarations.for_target(target) is not None


def communication(
  declarations: Declarations, target: str | None
) -> Communication | None:
  """How calls of `target` talk to other ranks, by its declaration
  (``communicates``); None when it does not, or nothing declares it. The
  cross-rank check asks it here, as every stage asks what a call touches."""
  declaration = declarations.for_target(target)
  return None if declaration is None else declaration.communicates
