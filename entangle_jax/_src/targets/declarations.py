"""What a project or a binding says about its custom-call targets.

Three sources, first match wins, and within one source an exact name
before a glob (``*``, ``?``, ``[...]``, as `fnmatch` reads them):

1. the ``[tool.entangle-jax]`` table of the nearest ``pyproject.toml``
   that has one, searched from the working directory upward;
2. `declare_target` (and `declare_target_mode`) calls in this process: a
   binding declares the targets it registers;
3. the entry points of group ``entangle_jax.declarations``: an installed
   binding publishes its declarations for its users, as a mapping in the
   table's form (or a function returning one);
4. `BUILT_IN`: JAX's host callbacks are shared across devices.

The table, in full (`markdown` lists the keys)::

  [tool.entangle-jax]
  read_targets = ["solve_*", "dot_*"]   # the short form: calls that only read
  distinct_elements = false             # for every target (see below)

  [tool.entangle-jax.targets."tp_counter_*"]
  mode = "write"            # "read", "write" or "none" (nothing shared)
  object = 0                # the operand that names its object
  returns_object = [0]      # results that hand back that object
  distinct_elements = true  # distinct elements of one array: distinct objects
  devices = "per-device"    # or "shared": one object for every device

  [[tool.entangle-jax.safe_pairs]]
  first = "tp_log_*"
  second = "tp_counter_get"
  reason = "the log has its own lock"
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import importlib.metadata
import os
import pathlib
import tomllib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from entangle_jax._src.targets import example_store as _example_store_targets

TargetMode = Literal["read", "write", "none"]
TARGET_MODES: tuple[TargetMode, ...] = ("read", "write", "none")
Devices = Literal["per-device", "shared"]
DEVICES: tuple[Devices, ...] = ("per-device", "shared")
ENTRY_POINT_GROUP = "entangle_jax.declarations"
TABLE = "tool.entangle-jax"


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
    devices: ``"per-device"``: each device has its own object, so copies
      of one SPMD module on different devices never conflict; ``"shared"``:
      one object for every device of the process.
    source: where it was declared (a ``pyproject.toml`` path, ``code``, or
      an entry point).
    mode_only: it says only the mode (a ``read_targets`` entry): the other
      fields come from the next declaration of the target, if any.

  Raises:
    TypeError, ValueError: a field of the wrong type or value.
  """

  pattern: str
  mode: TargetMode = "write"
  object: int | None = None
  returns_object: tuple[int, ...] = ()
  distinct_elements: bool | None = None
  devices: Devices = "per-device"
  source: str = "code"
  mode_only: bool = False

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
    if self.devices == "shared":
      parts.append("shared across devices")
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


# Declarations made in code --------------------------------------------------

_in_code: dict[str, TargetDeclaration] = {}


def declare_target(
  pattern: str,
  *,
  mode: TargetMode = "write",
  object: int | None = None,
  returns_object: Iterable[int] = (),
  distinct_elements: bool | None = None,
  devices: Devices = "per-device",
  replace: bool = True,
) -> TargetDeclaration:
  """Declares, for this process, what calls to the targets `pattern`
  matches touch (a name, or a glob such as ``"mylib_*"``).

  For a binding that registers its own FFI targets: call it next to the
  registration. The arguments are the keys of a ``[tool.entangle-jax]``
  target table (`TargetDeclaration` says what each means), and a project's
  ``pyproject.toml`` overrides them. Declaring a pattern again replaces its
  declaration; with ``replace=False`` an earlier code declaration of it
  is kept instead (a library declaring its own targets as it loads, below
  what its user declared before). Returns the declaration in effect.

  Raises:
    TypeError, ValueError: an argument of the wrong type or value; the
      message names it.
  """
  declaration = _target(
    pattern,
    {
      "mode": mode,
      "object": object,
      "returns_object": returns_object,
      "distinct_elements": distinct_elements,
      "devices": devices,
    },
    "code",
  )
  if not isinstance(replace, bool):
    raise TypeError(f"replace must be a bool, not {type(replace).__name__}")
  if replace or pattern not in _in_code:
    _in_code[pattern] = declaration
  return _in_code[pattern]


def set_mode(pattern: str, mode: TargetMode) -> None:
  """Declares the mode of `pattern` in code, keeping the rest of its code
  declaration (a new one if there is none)."""
  current = _in_code.get(pattern)
  if current is None:
    # Only the mode: what another source declares of it still holds.
    _in_code[pattern] = TargetDeclaration(pattern, mode, mode_only=True)
  else:
    _in_code[pattern] = dataclasses.replace(current, mode=mode)


def code_read_targets() -> frozenset[str]:
  """The target names declared ``"read"`` in code, now."""
  return frozenset(p for p, d in _in_code.items() if d.mode == "read")


def forget(pattern: str) -> None:
  """Drops the code declaration of `pattern`, if any."""
  _in_code.pop(pattern, None)


# The pyproject.toml table ---------------------------------------------------


def find_pyproject(
  start: str | os.PathLike[str] | None = None,
) -> pathlib.Path | None:
  """The nearest ``pyproject.toml`` with a ``[tool.entangle-jax]`` table,
  from `start` (the working directory) upward; None when there is none."""
  here = pathlib.Path(start if start is not None else os.getcwd()).resolve()
  for directory in (here, *here.parents):
    candidate = directory / "pyproject.toml"
    try:
      mtime = candidate.stat().st_mtime
    except OSError:
      continue
    if _table(str(candidate), mtime) is not None:
      return candidate
  return None


@functools.lru_cache(maxsize=32)
def _table(path: str, mtime: float) -> Any:
  """The ``[tool.entangle-jax]`` table of the file at `path`, or None;
  read once per modification time."""
  del mtime  # Part of the key: an edited file is read again.
  text = pathlib.Path(path).read_text()
  if "entangle" not in text:
    return None
  try:
    parsed = tomllib.loads(text)
  except tomllib.TOMLDecodeError as error:
    raise ValueError(f"{path}: not valid TOML: {error}") from None
  tool = parsed.get("tool", {})
  if not isinstance(tool, dict):
    return None
  for misspelt in ("entangle_jax", "entanglejax", "entangle"):
    if misspelt in tool:
      raise ValueError(
        f"{path}: [tool.{misspelt}] is not read; the table is "
        "[tool.entangle-jax]"
      )
  return tool.get("entangle-jax")


@functools.lru_cache(maxsize=8)
def _project(path: str, mtime: float) -> Declarations:
  table = _table(path, mtime)
  assert table is not None
  return from_table(table, path)


def from_table(table: Mapping[str, Any], source: str) -> Declarations:
  """The declarations of one ``[tool.entangle-jax]`` table (a mapping as
  TOML gives it), from `source`.

  Raises:
    ValueError, TypeError: a key or value the table does not allow; the
      message names `source` and the key.
  """
  if not isinstance(table, Mapping):
    raise TypeError(f"{source}: [{TABLE}] must be a table")
  unknown = set(table) - {
    "read_targets",
    "distinct_elements",
    "targets",
    "safe_pairs",
  }
  if unknown:
    raise ValueError(
      f"{source}: [{TABLE}] has unknown keys {sorted(unknown)}; it takes "
      "read_targets, distinct_elements, targets and safe_pairs"
    )
  targets = []
  for pattern, keys in _mapping(table.get("targets", {}), source, "targets"):
    targets.append(_target(pattern, keys, source))
  reads = table.get("read_targets", [])
  if not isinstance(reads, list) or not all(isinstance(r, str) for r in reads):
    raise TypeError(f"{source}: read_targets must be a list of target names")
  declared = {t.pattern for t in targets}
  targets += [
    TargetDeclaration(r, "read", source=source, mode_only=True)
    for r in reads
    if r not in declared
  ]
  pairs = []
  for index, pair in enumerate(table.get("safe_pairs", [])):
    where = f"{source}: safe_pairs[{index}]"
    if not isinstance(pair, Mapping) or set(pair) != {
      "first",
      "second",
      "reason",
    }:
      raise ValueError(f"{where} must have exactly first, second and reason")
    for key in ("first", "second", "reason"):
      if not isinstance(pair[key], str) or not pair[key].strip():
        raise ValueError(f"{where}: {key} must be a non-empty string")
    pairs.append(
      SafePair(pair["first"], pair["second"], pair["reason"], source)
    )
  distinct = table.get("distinct_elements", False)
  if not isinstance(distinct, bool):  # The project's: true or false.
    raise TypeError(f"{source}: distinct_elements must be true or false")
  return Declarations(tuple(targets), tuple(pairs), distinct)


def _mapping(value: object, source: str, key: str):
  if not isinstance(value, Mapping):
    raise TypeError(f"{source}: {key} must be a table")
  return value.items()


_TARGET_KEYS = {
  "mode",
  "object",
  "returns_object",
  "distinct_elements",
  "devices",
}


def _target(pattern: object, keys: object, source: str) -> TargetDeclaration:
  """The declaration a target table (or `declare_target`'s arguments)
  gives."""
  if not isinstance(pattern, str) or not pattern:
    raise TypeError(f"{source}: a target pattern must be a non-empty str")
  where = f"{source}: target {pattern!r}"
  if not isinstance(keys, Mapping):
    raise TypeError(f"{where} must be a table of {sorted(_TARGET_KEYS)}")
  unknown = set(keys) - _TARGET_KEYS
  if unknown:
    raise ValueError(
      f"{where} has unknown keys {sorted(unknown)}; it takes "
      f"{sorted(_TARGET_KEYS)}"
    )
  operand = keys.get("object")
  returns = keys.get("returns_object", ())
  if isinstance(returns, str) or not isinstance(returns, Iterable):
    raise TypeError(
      f"{where}: returns_object must be a list of result indices, not "
      f"{returns!r}"
    )
  return TargetDeclaration(
    pattern,
    keys.get("mode", "write"),
    None if operand == "library" else operand,
    tuple(returns),
    keys.get("distinct_elements"),
    keys.get("devices", "per-device"),
    source,
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


def _is_index(value: object) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# Entry points ---------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _published() -> Declarations:
  found: list[Declarations] = []
  for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
    source = f"entry point {entry.name} ({entry.value})"
    value = entry.load()
    if callable(value):
      value = value()
    found.append(from_table(value, source))
  return _merged(found, distinct=False)


def _merged(parts: list[Declarations], *, distinct: bool) -> Declarations:
  return Declarations(
    tuple(t for p in parts for t in p.targets),
    tuple(s for p in parts for s in p.safe_pairs),
    distinct,
  )


_HOST = "built in: host callbacks run Python, one interpreter for all devices"
_STORE = "built in: the example store"
BUILT_IN = _merged(
  [
    Declarations(
      targets=tuple(
        TargetDeclaration(pattern, "write", devices="shared", source=_HOST)
        for pattern in ("xla_ffi_python_*", "xla_python_*")
      ),
    ),
    from_table(_example_store_targets.DECLARATIONS, _STORE),
  ],
  distinct=False,
)
"""What the analysis knows without being told, below every other source:
JAX's host callbacks (``io_callback``, ``jax.debug.callback``) may write
anything, and run in the one Python process for every device; the example
store's targets (`entangle_jax._src.targets.example_store`)."""


def current(start: str | os.PathLike[str] | None = None) -> Declarations:
  """The declarations in effect now: the nearest ``pyproject.toml`` table
  (from `start`, by default the working directory), then code, then
  entry points.

  Raises:
    ValueError, TypeError: the table, or a published declaration, is not
      valid (the message names the file or the entry point).
  """
  parts = []
  path = find_pyproject(start)
  project = None
  if path is not None:
    project = _project(str(path), path.stat().st_mtime)
    parts.append(project)
  parts.append(Declarations(tuple(_in_code.values())))
  parts.append(_published())
  parts.append(BUILT_IN)
  distinct = project.distinct_elements if project else False
  return _merged(parts, distinct=distinct)


def markdown() -> str:
  """The keys of a target table, for ``docs/proving_order.md``."""
  rows = [
    (
      "mode",
      '`"write"`',
      'what the call does to its object: `"read"`, '
      '`"write"`, or `"none"` (touches no state another call sees)',
    ),
    (
      "object",
      '`"library"`',
      "the operand index that names its object "
      '(a handle, a token); `"library"`: every call of the library may '
      "touch the same state. An index beyond a call's operands is an "
      "error",
    ),
    (
      "returns_object",
      "`[]`",
      "result indices that hand back the same "
      "object (a new token for the same handle)",
    ),
    (
      "distinct_elements",
      "the project's",
      "different elements of one array of handles name different objects "
      "(where a target says nothing, the project's `distinct_elements`, "
      "itself `false` by default)",
    ),
    (
      "devices",
      '`"per-device"`',
      "each device has its own object; "
      '`"shared"`: one object for every device of the process',
    ),
  ]
  lines = ["| Key | Default | Meaning |", "|---|---|---|"]
  lines += [f"| `{k}` | {d} | {m} |" for k, d, m in rows]
  return "\n".join(lines) + "\n"
