"""The sanitizer's records as data: `SanitizedCall`, and the objects a
call touches.

What a call touches follows the static check's policy (the declarations,
`entangle_jax._src.targets`, read as `_order/access.accesses_of` reads
them, and the one conflict rule, `entangle_jax._src.conflict_rule`):

* a declared call touches the values its object operand held, each one
  object; a ``"none"`` target touches nothing;
* a call the static check cannot tie to one object may touch any object
  (`SanitizedObject` with no value): a target nobody declared, one
  declared with no object operand (the whole library), a declared object
  operand whose values were not recorded (not an integer array, or not
  host memory), or more values than a record holds (`truncated`);
* a host callback JAX declares pure (``pure_callback``) touches nothing;
  any other host callback (``io_callback``, ``jax.debug.callback``) may
  write anything, Python state included.

An object is a value: the package that registered a target names it in
words only, so two packages' calls on one slot are calls on one object,
as the static check sees them.
"""

from __future__ import annotations

import dataclasses

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
  declaration: TargetDeclaration | None
  unknown: str | None = None
  """Why its objects are unknown, when they are."""


def touches(call: SanitizedCall, declarations: Declarations) -> Touch:
  """The objects `call` touches, and how (see the module)."""
  if call.family == HOST_FAMILY:
    if call.site is not None and call.site.pure:
      return Touch("none", (), None)
    return Touch("write", (SanitizedObject(HOST_FAMILY, None),), None)
  declaration = declarations.for_target(call.target)
  if declaration is None:
    why = "a target nobody declared may write anything"
    return Touch("write", (SanitizedObject(call.family, None, why),), None, why)
  if declaration.mode == "none":
    return Touch("none", (), declaration)
  if declaration.object is None:
    why = "declared with no object operand: the whole library"
    return Touch(
      declaration.mode,
      (SanitizedObject(call.family, None, why),),
      declaration,
    )
  values = call.values_of(declaration.object)
  why = None
  if call.truncated:
    why = (
      f"its operands held more than {MAX_VALUES} values, more than a "
      "record holds: taken as touching any object"
    )
  elif values is None:
    why = (
      f"its object operand {declaration.object} was not recorded (not an "
      "integer array, or not host memory): taken as touching any object"
    )
  if why is not None:
    return Touch(
      declaration.mode,
      (SanitizedObject(call.family, None, why),),
      declaration,
      why,
    )
  assert values is not None
  objects = tuple(
    SanitizedObject(call.family, v) for v in dict.fromkeys(values)
  )
  return Touch(declaration.mode, objects, declaration)


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


def from_callbacks(records: list[tuple]) -> list[SanitizedCall]:
  """`SanitizedCall` records from `callbacks.drain`'s tuples."""
  return [
    SanitizedCall(
      site.target,
      site.module.platform,
      HOST_FAMILY,
      thread,
      start,
      end,
      run_id,
      site,
      (),
      failed,
      False,
      site.host_callback or "?",
    )
    for site, thread, start, end, run_id, failed in records
  ]
