"""Declarations made in code, for this process: `declare_target` and its
short form `declare_target_mode`. A binding calls them next to its FFI
registration; a project's ``pyproject.toml`` table overrides them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from entangle_jax._src.targets.communication import Communication
from entangle_jax._src.targets.declaration import (
  TARGET_MODES,
  Devices,
  PythonArgument,
  TargetDeclaration,
  TargetMode,
)
from entangle_jax._src.targets.table import target_from_keys

DECLARED: dict[str, TargetDeclaration] = {}
"""The code declarations in effect, by pattern."""


def declare_target(
  pattern: str,
  *,
  mode: TargetMode = "write",
  object: int | None = None,
  returns_object: Iterable[int] = (),
  distinct_elements: bool | None = None,
  devices: Devices = "shared",
  argument: PythonArgument | Mapping[str, Any] | None = None,
  communicates: Communication | Mapping[str, Any] | None = None,
  replace: bool = True,
) -> TargetDeclaration:
  """Declares, for this process, what calls to the targets `pattern`
  matches touch (a name, or a glob such as ``"mylib_*"``).

  For a binding that registers its own FFI targets: call it next to the
  registration. The arguments are the keys of a ``[tool.entangle-jax]``
  target table (`TargetDeclaration` says what each means; `argument` is a
  `PythonArgument` or a mapping of its fields, ``{"function":
  "mylib.count", "position": 0, "name": "counter"}``; `communicates` a
  `Communication` or a mapping of its fields, ``{"kind": "collective",
  "communicator": "comm", "same_result": True}``), and a project's
  ``pyproject.toml`` overrides them. Declaring a pattern again replaces its
  declaration; with ``replace=False`` an earlier code declaration of it
  is kept instead (a library declaring its own targets as it loads, below
  what its user declared before). Returns the declaration in effect.

  Raises:
    TypeError, ValueError: an argument of the wrong type or value; the
      message names it.
  """
  keys = {
    "mode": mode,
    "object": object,
    "returns_object": returns_object,
    "distinct_elements": distinct_elements,
    "devices": devices,
    "argument": argument,
    "communicates": communicates,
  }
  try:
    declaration = target_from_keys(pattern, keys, "code")
  except (TypeError, ValueError) as error:
    # The table's words name the declaration's source ("code: ..."); here
    # the function the user called, and the argument, are the place.
    said = str(error).removeprefix("code: ")
    if not isinstance(pattern, str) or not pattern:
      said = f"pattern must be a non-empty str, not {pattern!r}"
    raise type(error)(f"declare_target: {said}") from None
  if not isinstance(replace, bool):
    raise TypeError(
      f"declare_target: replace must be a bool, not {type(replace).__name__}"
    )
  if replace or pattern not in DECLARED:
    DECLARED[pattern] = declaration
  return DECLARED[pattern]


def set_mode(pattern: str, mode: TargetMode) -> None:
  """Declares the mode of `pattern` in code, keeping the rest of its code
  declaration (a new one if there is none)."""
  current = DECLARED.get(pattern)
  if current is None:
    # Only the mode: what another source declares of it still holds.
    DECLARED[pattern] = TargetDeclaration(pattern, mode, mode_only=True)
  else:
    DECLARED[pattern] = dataclasses.replace(current, mode=mode)


def code_read_targets() -> frozenset[str]:
  """The target names declared ``"read"`` in code, now."""
  return frozenset(p for p, d in DECLARED.items() if d.mode == "read")


def forget(pattern: str) -> None:
  """Drops the code declaration of `pattern`, if any."""
  DECLARED.pop(pattern, None)


def declare_target_mode(target: str, mode: TargetMode) -> None:
  """Declares whether calls to custom-call target `target` only read.

  The short form of `declare_target`: ``races`` and
  ``order_graph`` count a call to a target declared ``"read"`` as reading
  its object (with no object operand declared, anything): two such calls
  never conflict, and one conflicts with every call that may write it. A
  target never declared, or declared ``"write"`` (which undoes
  ``"read"``, keeping the rest of its declaration), may write. Calls made
  through ``Resource.read`` and ``Resource.write`` have their method's
  mode instead. The declaration holds for the whole process, like the FFI
  registration of the target it describes; a project's ``pyproject.toml``
  table overrides it. The example store's targets are declared built in
  (`entangle_jax._src.targets.sources.BUILT_IN`).

  Raises:
    TypeError: `target` is not a str.
    ValueError: `target` is empty, or `mode` is not ``"read"``,
      ``"write"`` or ``"none"`` (touches nothing shared).
  """
  if not isinstance(target, str):
    raise TypeError(
      f"declare_target_mode: target must be a str, not {type(target).__name__}"
    )
  if not target:
    raise ValueError("declare_target_mode: target must not be empty")
  if mode not in TARGET_MODES:
    raise ValueError(
      "declare_target_mode: mode must be 'read', 'write' or 'none', not "
      f"{mode!r}"
    )
  set_mode(target, mode)
