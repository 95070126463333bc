"""The sanitizer's records as data: `SanitizedCall`, and the objects a
call touches.

What a call touches is the one access policy's answer
(`entangle_jax._src.access_policy`, which the static check and
``in_program_order`` ask too), given what the run recorded of its
operands; `touches` only words it in the sanitizer's terms:

* a declared call touches the values its object operand held, each one
  object; a ``"none"`` target touches nothing;
* a call the policy cannot tie to one object may touch any object
  (`SanitizedObject` with no value): a target nobody declared, one
  declared with no object operand (the whole library), a declared object
  operand whose values were not recorded (not an integer array, or not
  host memory), or more values than a record holds (`truncated`);
* a host callback JAX declares pure (``pure_callback``) touches nothing;
  any other host callback (``io_callback``, ``jax.debug.callback``) is
  what its target's declaration says, by default a write of anything,
  Python state included.

An object is a value: the package that registered a target names it in
words only, so two packages' calls on one slot are calls on one object,
as the static check sees them. (A call's ``Resource`` records are not
known at run time: the sanitizer reads the declarations alone.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from entangle_jax._src import access_policy
from entangle_jax._src.access_policy import AnyObject, Footprint
from entangle_jax._src.targets.declaration import (
  Declarations,
  TargetDeclaration,
)
from entangle_jax.testing._sanitize import sites as _sites

HOST_FAMILY = "host callbacks"
"""The family of the one object every host callback touches."""

MAX_VALUES = 4096
"""The most operand values recorded of one call (native/sanitize's
``kMaxTotalValues``: 16 in the record, the rest in its log's overflow
store); a call with more is `SanitizedCall.truncated`."""


@dataclasses.dataclass(frozen=True)
class SanitizedObject:
  """One object as the run named it.

  Attributes:
    family: the package that registered the target (words only: objects
      are compared by value).
    value: the operand value that names it; None for "any object" (a call
      that may touch anything, see the module).
    why: for "any object", why the call may touch anything.
  """

  family: str = dataclasses.field(compare=False)
  value: int | None
  why: str = dataclasses.field(default="", compare=False)

  def __hash__(self) -> int:
    return hash(self.value)  # As equality: by value alone.

  @property
  def anything(self) -> bool:
    """Whether this stands for any object."""
    return self.value is None

  def __str__(self) -> str:
    if self.family == HOST_FAMILY:
      return "Python state (host callbacks may touch anything)"
    if self.value is None:
      return f"any object ({self.family}: {self.why or 'the whole library'})"
    shown = self.value if -(2**31) <= self.value < 2**31 else hex(self.value)
    return f"{self.family} object {shown}"


@dataclasses.dataclass(eq=False, slots=True)
class SanitizedCall:
  """One native call as it ran under the sanitizer.

  Attributes:
    target: the FFI target.
    platform: XLA's platform name (``Host`` on CPU).
    family: the top-level package that registered the target.
    thread: the OS thread that ran it.
    start_ns, end_ns: when it began and returned (a monotonic clock, in
      nanoseconds; on GPU, when the host enqueued it).
    run_id: XLA's id of the execution it ran in.
    site: its place in the program; None where it cannot be known (a
      module compiled before the sanitizer started, or taken from a cache).
    operands: (operand index, values) of the integer operands recorded.
    failed: the handler returned an error (a host callback: raised).
    truncated: some operand values did not fit in the record.
    function: for a host callback, its Python function's name (``"?"``
      where it could not be found); None for a native call.
    device: XLA's ordinal of the device the call ran for (-1 where it is
      not known: a host callback, or an XLA without the query).
  """

  target: str
  platform: str
  family: str
  thread: int
  start_ns: int
  end_ns: int
  run_id: int
  site: _sites.CallSite | None
  operands: tuple[tuple[int, tuple[int, ...]], ...]
  failed: bool = False
  truncated: bool = False
  function: str | None = None
  device: int = -1

  @property
  def label(self) -> str:
    """The target, and for a host callback its Python function."""
    if self.function is None:
      return self.target
    return f"host callback {self.function} ({self.target})"

  @property
  def place(self) -> str:
    """The call's place in its program, in words."""
    if self.site is None:
      return "place unknown (compiled before the sanitizer started)"
    return str(self.site)

  def values_of(self, operand: int) -> tuple[int, ...] | None:
    """The recorded values of `operand`, or None if it was not recorded."""
    return next((v for i, v in self.operands if i == operand), None)

  def __str__(self) -> str:
    return f"{self.label} ({self.place}, thread {self.thread})"


@dataclasses.dataclass(frozen=True)
class Touch:
  """What a call does to objects, by its declaration."""

  mode: str
  objects: tuple[SanitizedObject, ...]
  footprint: Footprint
  """The access policy's answer, which the rest is read from."""
  unknown: str | None = None
  """Why its objects are unknown, when they are."""

  @property
  def declaration(self) -> TargetDeclaration | None:
    """The declaration that applied, if any, for reports to name."""
    return self.footprint.declaration


def touches(call: SanitizedCall, declarations: Declarations) -> Touch:
  """The objects `call` touches, and how (see the module)."""
  host = call.family == HOST_FAMILY
  found = access_policy.footprint(
    call.target,
    declarations,
    operands=_Recorded(call),
    side_effect=not (host and call.site is not None and call.site.pure),
    host_callback=host,
  )
  if found.touches_nothing:
    return Touch("none", (), found)
  if found.object is not None:
    objects = tuple(
      SanitizedObject(call.family, v) for v in dict.fromkeys(found.object)
    )
    return Touch(found.mode, objects, found)
  why = _why_any_object(call, found)
  anything = (SanitizedObject(call.family, None, why),)
  unknown = why if found.any_object is not AnyObject.WHOLE_LIBRARY else None
  return Touch(found.mode, anything, found, unknown)


def _why_any_object(call: SanitizedCall, found: Footprint) -> str:
  """Why `call` may touch any object, in the report's words ("" for a host
  callback: its object says it touches Python state)."""
  if call.family == HOST_FAMILY:
    return ""
  if found.any_object is not AnyObject.NOT_KNOWN:
    assert found.any_object is not None  # Set whenever object is None.
    return found.any_object.value
  if call.truncated:
    return (
      f"its operands held more than {MAX_VALUES} values, more than a "
      "record holds: taken as touching any object"
    )
  return (
    f"its object operand {found.operand} was not recorded (not an "
    "integer array, or not host memory): taken as touching any object"
  )


class _Recorded(Sequence):
  """The operands of `call` as the access policy reads them: the values
  each held, where the run recorded them whole (None: not recorded, or
  cut short by `truncated`)."""

  def __init__(self, call: SanitizedCall):
    self._call = call

  def __len__(self) -> int:
    return 1 + max((i for i, _ in self._call.operands), default=-1)

  def __getitem__(self, k):  # Sequence's overloads: an int here.
    if self._call.truncated:
      return None
    return self._call.values_of(k)


FIELDS = (
  ("thread", "<i8"),
  ("start_ns", "<i8"),
  ("end_ns", "<i8"),
  ("site", "<i8"),
  ("run_id", "<i8"),
  ("wrapped", "<i4"),
  ("failed", "<i4"),
  ("n_values", "<i4"),
  ("truncated", "<i4"),
  ("device", "<i4"),
)
"""The native record's scalar fields, as the extension's ``record_layout``
names them (`columns.NativeColumns` reads each as a column)."""


def record_dtype(layout: dict):
  """The numpy dtype of the native drain's packed records (`layout`: the
  extension's ``record_layout``)."""
  import numpy as np

  m = layout["max_values"]
  fields = [
    *FIELDS,
    ("overflow", "<i8"),
    ("operand", ("u1", (m,))),
    ("values", ("<i8", (m,))),
  ]
  return np.dtype(
    {
      "names": [n for n, _ in fields],
      "formats": [f for _, f in fields],
      "offsets": [layout[n] for n, _ in fields],
      "itemsize": layout["itemsize"],
    }
  )
