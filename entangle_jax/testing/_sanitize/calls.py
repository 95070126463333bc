"""The sanitizer's records as data: `SanitizedCall`, and the objects a
call touches.

A call touches the objects its declaration names (`entangle_jax._src.
targets`): the values of its object operand, or the whole library when it
names none; a ``"none"`` target touches nothing. A target nobody declared
touches the value of every integer operand of up to 8 elements, and writes
them. An object is a value within the family (the top-level package) that
registered the target: a klujax handle is never an example store slot.

A host callback (``io_callback``, ``pure_callback``, ``jax.debug.callback``)
declares nothing: like an undeclared call it may write anything, and
anything it touches is Python state, one object for every host callback
(`HOST`): any two host callbacks conflict.
"""

from __future__ import annotations

import dataclasses

from entangle_jax._src.targets.declaration import (
  Declarations,
  TargetDeclaration,
)
from entangle_jax.testing._sanitize import sites as _sites
from entangle_jax.testing._sanitize import wrapping

HOST_FAMILY = "host callbacks"
"""The family of the one object every host callback touches."""

SMALL_OPERAND = 8
"""Integer operands of at most this many elements are recorded whole."""


@dataclasses.dataclass(frozen=True)
class SanitizedObject:
  """One object as the run named it.

  Attributes:
    family: the package that registered the targets.
    value: the operand value that names it; None for the whole library.
  """

  family: str
  value: int | None

  def __str__(self) -> str:
    if self.family == HOST_FAMILY:
      return "Python state (host callbacks may touch anything)"
    if self.value is None:
      return f"{self.family} (the whole library)"
    shown = self.value if -(2**31) <= self.value < 2**31 else hex(self.value)
    return f"{self.family} object {shown}"


@dataclasses.dataclass(frozen=True, eq=False)
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
  """The objects `call` touches, and how."""
  if call.family == HOST_FAMILY:
    return Touch("write", (SanitizedObject(HOST_FAMILY, None),), None)
  declaration = declarations.for_target(call.target)
  if declaration is None:
    values = [v for _, vs in call.operands for v in vs]
    objects = tuple(
      SanitizedObject(call.family, v) for v in dict.fromkeys(values)
    )
    return Touch("write", objects, None)
  if declaration.mode == "none":
    return Touch("none", (), declaration)
  if declaration.object is None:
    return Touch(
      declaration.mode, (SanitizedObject(call.family, None),), declaration
    )
  values = call.values_of(declaration.object)
  if values is None:
    return Touch(
      declaration.mode,
      (),
      declaration,
      f"its object operand {declaration.object} was not recorded (not an "
      f"integer array, or not read on this platform)",
    )
  objects = tuple(
    SanitizedObject(call.family, v) for v in dict.fromkeys(values)
  )
  return Touch(declaration.mode, objects, declaration)


def from_records(records: list[tuple]) -> list[SanitizedCall]:
  """`SanitizedCall` records from the native drain's tuples (see
  native/sanitize/module.cc)."""
  found = []
  for (
    thread,
    start,
    end,
    site,
    run_id,
    index,
    failed,
    truncated,
    operands,
    values,
  ) in records:
    target = wrapping.target_of(index)
    if target is None:
      continue
    grouped: dict[int, list[int]] = {}
    for operand, value in zip(operands, values, strict=True):
      grouped.setdefault(operand, []).append(value)
    found.append(
      SanitizedCall(
        target.name,
        target.platform,
        target.family,
        thread,
        start,
        end,
        run_id,
        _sites.site(site) if site >= 0 else None,
        tuple((k, tuple(v)) for k, v in grouped.items()),
        failed,
        truncated,
      )
    )
  found.sort(key=lambda c: (c.start_ns, c.end_ns))
  return found


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
