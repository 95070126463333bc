"""What a declaration says about a native target, and which one applies.

`TargetDeclaration` (one target or glob), `SafePair` (two targets whose
calls never conflict) and `Declarations` (all in effect, in precedence
order). Matching: an exact name before a glob (``*``, ``?``, ``[...]``, as
`fnmatch` reads them), and sources in order; a mode-only declaration (a
``read_targets`` entry) takes the rest from the next match. Where they
come from is `entangle_jax._src.targets.sources`'s concern.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
from collections.abc import Callable
from typing import Literal

from entangle_jax._src.targets.communication import Communication

TargetMode = Literal["read", "write", "none"]
TARGET_MODES: tuple[TargetMode, ...] = ("read", "write", "none")
Devices = Literal["per-device", "shared"]
DEVICES: tuple[Devices, ...] = ("per-device", "shared")


@dataclasses.dataclass(frozen=True)
class PythonArgument:
  """The argument of a binding's Python function that carries a call's
  object: what its user holds, where the HLO knows only an operand.

  Attributes:
    function: the function users call, as they write it
      (``"klujax.solve_with_numeric"``).
    position: the argument's position (0 for the first).
    name: its parameter name (``"numeric"``), if known.
  """

  function: str
  position: int
  name: str | None = None

  def __str__(self) -> str:
    name = f" (`{self.name}`)" if self.name else ""
    return f"{self.position}{name} of `{self.function}`"


@dataclasses.dataclass(frozen=True)
class TargetDeclaration:
  """What calls to the targets `pattern` matches do.

  Attributes:
    pattern: a target name, or a glob over target names.
    mode: ``"read"`` (only reads its object), ``"write"`` (may change it)
      or ``"none"`` (touches no state another call can see: a thread-safe
      create, a pure kernel).
    object: the operand that names the object the call touches (a handle,
      a token); None: the whole library, which every call of it may touch.
    returns_object: the results (tuple elements; ``0`` for a call with one
      result) that hand back the object, the same object, for later calls.
    distinct_elements: different elements of one array of handles name
      different objects (an array of handles, each created once); None:
      as the project says (`Declarations.distinct_elements`).
    devices: ``"shared"`` (the default, the safe one): one object for
      every device of the process, so copies of one SPMD module's call on
      different devices may conflict; ``"per-device"``: each device has its
      own object, so they never do.
    source: where it was declared (a ``pyproject.toml`` path, ``code``, or
      an entry point).
    mode_only: it says only the mode (a ``read_targets`` entry): the other
      fields come from the next declaration of the target, if any.
    argument: the argument of the binding's Python function that carries
      the object (`PythonArgument`), for fix texts to name what the user
      holds rather than the operand; None: fix texts name the operand.

  Raises:
    TypeError, ValueError: a field of the wrong type or value.
  """

  pattern: str
  mode: TargetMode = "write"
  object: int | None = None
  returns_object: tuple[int, ...] = ()
  distinct_elements: bool | None = None
  devices: Devices = "shared"
  source: str = "code"
  mode_only: bool = False
  argument: PythonArgument | None = None
  communicates: Communication | None = None

  def __post_init__(self):
    _check_target(self)

  def matches(self, target: str) -> bool:
    """Whether `target` is one of the targets this declares."""
    return pattern_matches(self.pattern, target)

  def __str__(self) -> str:
    parts = [self.mode]
    if self.object is not None:
      parts.append(f"object operand {self.object}")
    if self.returns_object:
      parts.append(f"returns it as result {list(self.returns_object)}")
    if self.distinct_elements is not None:
      parts.append(
        f"distinct elements {'' if self.distinct_elements else 'not '}distinct"
      )
    if self.devices == "per-device":
      parts.append("one object per device")
    if self.communicates is not None:
      parts.append(f"communicates: {self.communicates}")
    return f"`{self.pattern}` ({', '.join(parts)}; from {self.source})"


@dataclasses.dataclass(frozen=True)
class SafePair:
  """Two targets (names or globs) whose calls never conflict, and why."""

  first: str
  second: str
  reason: str
  source: str = "code"

  def covers(self, a: str | None, b: str | None) -> bool:
    """Whether calls to targets `a` and `b` (either order) are this pair."""
    if a is None or b is None:
      return False
    one, two = _matcher(self.first), _matcher(self.second)
    return (one(a) and two(b)) or (one(b) and two(a))


@dataclasses.dataclass(frozen=True)
class Declarations:
  """The declarations an analysis applies, in precedence order."""

  targets: tuple[TargetDeclaration, ...] = ()
  safe_pairs: tuple[SafePair, ...] = ()
  distinct_elements: bool = False
  """The project's ``distinct_elements``: for targets that say nothing."""

  def for_target(self, target: str | None) -> TargetDeclaration | None:
    """The declaration that applies to `target`, or None."""
    if target is None:
      return None
    found = self._found
    if target not in found:
      found[target] = _resolve(self.targets, target)
    return found[target]

  def distinct_for(self, declaration: TargetDeclaration | None) -> bool:
    """Whether distinct elements are distinct objects for calls that
    `declaration` (None: nothing) describes: its own say, else the
    project's."""
    if declaration is not None and declaration.distinct_elements is not None:
      return declaration.distinct_elements
    return self.distinct_elements

  def __hash__(self) -> int:
    return self._hash

  @functools.cached_property
  def _hash(self) -> int:
    # Hashed once: the transform's caches key on the declarations for
    # each equation of a program, and hashing every declaration each time
    # cost more than the look-up it keyed. (Equality sees the same fields.)
    return hash((self.targets, self.safe_pairs, self.distinct_elements))

  @functools.cached_property
  def _found(self) -> dict[str, TargetDeclaration | None]:
    # The answers so far: a module asks about each target thousands of
    # times. (Stored in the instance's __dict__; equality and hash see
    # only the fields.)
    return {}

  def safe(self, a: str | None, b: str | None) -> SafePair | None:
    """The safe pair that covers targets `a` and `b`, or None."""
    return next((p for p in self.safe_pairs if p.covers(a, b)), None)


@functools.lru_cache(maxsize=4096)
def _is_glob(pattern: str) -> bool:
  return any(c in pattern for c in "*?[")


@functools.lru_cache(maxsize=8192)
def pattern_matches(pattern: str, target: str) -> bool:
  """Whether `target` is `pattern`, or matches it as a glob."""
  return target == pattern or (
    _is_glob(pattern) and fnmatch.fnmatchcase(target, pattern)
  )


def _matcher(pattern: str) -> Callable[[str], bool]:
  return lambda target: pattern_matches(pattern, target)


def _matches_in_order(
  declarations: tuple[TargetDeclaration, ...], target: str
) -> list[TargetDeclaration]:
  """The declarations of `target`, first the one that wins: sources in
  order, and in each an exact name before its globs."""
  found = []
  for source in dict.fromkeys(d.source for d in declarations):
    mine = [d for d in declarations if d.source == source]
    found += [d for d in mine if d.pattern == target]
    found += [d for d in mine if d.pattern != target and d.matches(target)]
  return found


def _resolve(
  declarations: tuple[TargetDeclaration, ...], target: str
) -> TargetDeclaration | None:
  """The declaration that applies to `target`: the first match, where a
  mode-only one (a ``read_targets`` entry) takes the rest from the next."""
  matches = _matches_in_order(declarations, target)
  if not matches:
    return None
  first = matches[0]
  if not first.mode_only:
    return first
  rest = next((d for d in matches[1:] if not d.mode_only), None)
  if rest is None:
    return first
  return dataclasses.replace(
    rest, mode=first.mode, source=f"{first.source} (mode); {rest.source}"
  )


def _check_target(d: TargetDeclaration) -> None:
  """Raises for a field of `d` of the wrong type or value, naming it."""
  if not isinstance(d.pattern, str) or not d.pattern:
    raise TypeError(f"{d.source}: a target pattern must be a non-empty str")
  where = f"{d.source}: target {d.pattern!r}"
  if d.mode not in TARGET_MODES:
    raise ValueError(
      f"{where}: mode must be one of {TARGET_MODES}, not {d.mode!r}"
    )
  if d.object is not None and not _is_index(d.object):
    raise ValueError(
      f"{where}: object must be an operand index (an int >= 0) or "
      f"'library', not {d.object!r}"
    )
  if not isinstance(d.returns_object, tuple) or not all(
    _is_index(r) for r in d.returns_object
  ):
    raise ValueError(
      f"{where}: returns_object must be a list of result indices, not "
      f"{d.returns_object!r}"
    )
  if d.returns_object and d.object is None:
    raise ValueError(f"{where}: returns_object needs an object operand")
  if d.distinct_elements is not None and not isinstance(
    d.distinct_elements, bool
  ):
    raise TypeError(f"{where}: distinct_elements must be true or false")
  if d.devices not in DEVICES:
    raise ValueError(
      f"{where}: devices must be one of {DEVICES}, not {d.devices!r}"
    )
  if d.argument is not None:
    a = d.argument
    if not isinstance(a, PythonArgument):
      raise TypeError(
        f"{where}: argument must be a table of function, position and "
        f"name, not {a!r}"
      )
    if not isinstance(a.function, str) or not a.function.strip():
      raise ValueError(f"{where}: argument.function must be a non-empty str")
    if not _is_index(a.position):
      raise ValueError(
        f"{where}: argument.position must be an int >= 0, not {a.position!r}"
      )
    if a.name is not None and (not isinstance(a.name, str) or not a.name):
      raise ValueError(f"{where}: argument.name must be a non-empty str")
    if d.object is None:
      raise ValueError(f"{where}: argument needs an object operand")
  if d.communicates is not None and not isinstance(
    d.communicates, Communication
  ):
    raise TypeError(
      f"{where}: communicates must be a table of kind, communicator, peer, "
      f"tag, ..., not {d.communicates!r}"
    )


def _is_index(value: object) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def merged(parts: list[Declarations], *, distinct: bool) -> Declarations:
  """`parts` as one `Declarations`, earlier parts first (they win)."""
  return Declarations(
    tuple(t for p in parts for t in p.targets),
    tuple(s for p in parts for s in p.safe_pairs),
    distinct,
  )
