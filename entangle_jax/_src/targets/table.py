"""The ``[tool.entangle-jax]`` table: how a project (``pyproject.toml``) or
a binding (an entry point) writes its declarations, and its keys.

The table, in full (`markdown` lists a target's keys)::

  [tool.entangle-jax]
  read_targets = ["mylib_query", "mylib_peek"]  # the short form: only read
  distinct_elements = false             # for every target (see below)

  [tool.entangle-jax.targets."tp_counter_*"]
  mode = "write"            # "read", "write" or "none" (nothing shared)
  object = 0                # the operand that names its object
  returns_object = [0]      # results that hand back that object
  distinct_elements = true  # distinct elements of one array: distinct objects
  devices = "per-device"    # each device its own object (default "shared")
  argument = { function = "mylib.count", position = 0, name = "counter" }

  [tool.entangle-jax.targets.mylib_allreduce]
  communicates = { kind = "collective", communicator = "comm", op = "op" }

  [[tool.entangle-jax.safe_pairs]]
  first = "tp_log_*"
  second = "tp_counter_get"
  reason = "the log has its own lock"
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

from entangle_jax._src.targets import communication
from entangle_jax._src.targets.declaration import (
  Declarations,
  PythonArgument,
  SafePair,
  TargetDeclaration,
)

TABLE = "tool.entangle-jax"


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
def project(path: str, mtime: float) -> Declarations:
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
    targets.append(target_from_keys(pattern, keys, source))
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


@dataclasses.dataclass(frozen=True)
class Key:
  """One key of a target's table: its name, its default as the docs show
  it, and what it means (the row ``docs/proving_order.md`` shows)."""

  name: str
  default: str
  meaning: str


KEYS: tuple[Key, ...] = tuple(
  Key(*row)
  for row in [
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
      '`"shared"`',
      "one object for every device of the process, so a call's copies on "
      'the devices of an SPMD module may conflict; `"per-device"`: each '
      "device has its own object (a call nothing declares is shared)",
    ),
    (
      "argument",
      "none",
      "the argument of the binding's Python function that carries the "
      "object, as a table: `function` (as users write it), `position` "
      "(0 for the first) and, optionally, `name`; fix texts then name it "
      '("argument 0 (`numeric`) of `klujax.solve_with_numeric`") rather '
      "than the operand. Needs `object`",
    ),
    (
      "communicates",
      "none",
      "the call talks to other ranks, for the cross-rank check "
      "([multi_process.md](multi_process.md)), as a table: `kind` "
      '(`"collective"`, `"send"`, `"recv"` or `"sendrecv"`); where its '
      "`communicator`, `peer`, `tag`, `source`, `source_tag` and reduction "
      "`op` are (an operand index, or an attribute's name); `match`, more "
      "places equal on every rank; `same_result = true` when every rank "
      "gets the same result (allreduce, allgather, bcast); `root`, the "
      "place of a rooted collective's root (equal on every rank; with "
      "`same_result`, a broadcast: the root's operand is every rank's "
      'result); `matched_by = "results"` where MPI matches a collective '
      "by the block each rank receives (a scatter), not by its operands",
    ),
  ]
)
"""Every key of a target's table, in the order the docs list them. A new
key goes here, in `TargetDeclaration` (with its check) and in
`target_from_keys`."""

TARGET_KEYS = frozenset(k.name for k in KEYS)


def target_from_keys(
  pattern: object, keys: object, source: str
) -> TargetDeclaration:
  """The declaration a target table (or `declare_target`'s arguments)
  gives."""
  if not isinstance(pattern, str) or not pattern:
    raise TypeError(f"{source}: a target pattern must be a non-empty str")
  where = f"{source}: target {pattern!r}"
  if not isinstance(keys, Mapping):
    raise TypeError(f"{where} must be a table of {sorted(TARGET_KEYS)}")
  unknown = set(keys) - TARGET_KEYS
  if unknown:
    raise ValueError(
      f"{where} has unknown keys {sorted(unknown)}; it takes "
      f"{sorted(TARGET_KEYS)}"
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
    keys.get("devices", "shared"),
    source,
    argument=_argument(keys.get("argument"), where),
    communicates=communication.from_keys(keys.get("communicates"), where),
  )


ARGUMENT_KEYS = frozenset({"function", "position", "name"})


def _argument(value: object, where: str) -> PythonArgument | None:
  """The `PythonArgument` an ``argument`` table (or one already made)
  gives; None for none."""
  if value is None or isinstance(value, PythonArgument):
    return value
  if not isinstance(value, Mapping):
    raise TypeError(
      f"{where}: argument must be a table of function, position and name, "
      f"not {value!r}"
    )
  unknown = set(value) - ARGUMENT_KEYS
  missing = {"function", "position"} - set(value)
  if unknown or missing:
    raise ValueError(
      f"{where}: argument takes function, position and (optionally) name"
      + (f"; unknown {sorted(unknown)}" if unknown else "")
      + (f"; missing {sorted(missing)}" if missing else "")
    )
  return PythonArgument(value["function"], value["position"], value.get("name"))


def markdown() -> str:
  """The keys of a target table, for ``docs/proving_order.md``."""
  lines = ["| Key | Default | Meaning |", "|---|---|---|"]
  lines += [f"| `{k.name}` | {k.default} | {k.meaning} |" for k in KEYS]
  return "\n".join(lines) + "\n"
