"""Where declarations come from, and which win.

Sources, first match wins, and within one source an exact name before a
glob:

1. the ``[tool.entangle-jax]`` table of the nearest ``pyproject.toml``
   that has one, searched from the working directory upward
   (`entangle_jax._src.targets.table`);
2. `declare_target` (and `declare_target_mode`) calls in this process
   (`entangle_jax._src.targets.in_code`): a binding declares the targets
   it registers;
3. the entry points of group ``entangle_jax.declarations``: an installed
   binding publishes its declarations for its users, as a mapping in the
   table's form (or a function returning one);
4. the declarations entangle-jax ships for bindings people use, where
   the binding is installed at a version they were checked against
   (`entangle_jax._src.targets.shipped`);
5. `BUILT_IN`: JAX's host callbacks are shared across devices, and the
   example store's targets are known.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import pathlib

from entangle_jax._src.targets import (
  example_store,
  in_code,
  names,
  shipped,
  table,
)
from entangle_jax._src.targets.declaration import (
  Declarations,
  TargetDeclaration,
  merged,
)

ENTRY_POINT_GROUP = "entangle_jax.declarations"


@functools.lru_cache(maxsize=1)
def _published() -> Declarations:
  found: list[Declarations] = []
  for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
    source = f"entry point {entry.name} ({entry.value})"
    value = entry.load()
    if callable(value):
      value = value()
    found.append(table.from_table(value, source))
  return merged(found, distinct=False)


_HOST = "built in: host callbacks run Python, one interpreter for all devices"
_STORE = "built in: the example store"
BUILT_IN = merged(
  [
    Declarations(
      targets=tuple(
        TargetDeclaration(pattern, "write", devices="shared", source=_HOST)
        for pattern in names.HOST_CALLBACK_PATTERNS
      ),
    ),
    table.from_table(example_store.DECLARATIONS, _STORE),
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
  entry points, then the shipped table, then what is built in.

  Raises:
    ValueError, TypeError: the table, or a published declaration, is not
      valid (the message names the file or the entry point).
  """
  return of_pyproject(table.find_pyproject(start))


def of_pyproject(path: pathlib.Path | None) -> Declarations:
  """The declarations in effect with the ``[tool.entangle-jax]`` table of
  the file at `path` (found by `current`, or named by the user; None:
  no table), then code, then entry points.

  Raises:
    ValueError, TypeError: as `current`.
  """
  parts = []
  project = None
  if path is not None:
    project = table.project(str(path), path.stat().st_mtime)
    parts.append(project)
  parts.append(Declarations(tuple(in_code.DECLARED.values())))
  parts.append(_published())
  parts.append(shipped.applied())
  parts.append(BUILT_IN)
  distinct = project.distinct_elements if project else False
  return merged(parts, distinct=distinct)
