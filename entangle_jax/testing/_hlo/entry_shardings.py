"""The entry parameters' shardings, where the optimized module lost them.

Up to jax 0.10, the optimized text of an SPMD module keeps each entry
parameter's sharding (``parameter(0), sharding={devices=[2]<=[2]}``), and
the check reads from it whether a parameter is split over the devices or
held alike by all (`entangle_jax.testing._order.objects.ObjectRef.tiled`,
``replicated``): what tells a handle array split over the devices from one
every device shares. From jax 0.11 on (Shardy), the optimized module
prints no sharding on its entry parameters, and the check took every
parameter for one the devices may share: it reported races across devices
that the report's own fix (a handle per shard, ``distinct_elements``) had
removed.

The shardings are still known elsewhere: in the module before optimization
that XLA dumps beside the optimized one (``…before_optimizations.txt``,
in GSPMD's words or Shardy's, ``{mesh['x'=2], [{'x'}]}``), and in a
``jax.stages.Compiled``'s ``input_shardings``. `complete` writes them back
into the optimized text, in the GSPMD words the parser reads, for the
parameters that lack one; nothing else changes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from entangle_jax.testing._hlo.attributes import mask_strings

TILED = "{devices=[0]<=[0]}"
"""Split over every device: each device holds other elements (the numbers
are not read, only that it is a split with no replication)."""
REPLICATED = "{replicated}"
"""Held alike by every device."""
PARTIAL = "{devices=[0]<=[0] last_tile_dim_replicate}"
"""Split over some devices, held alike by others: neither of the above."""

_PARAMETER = re.compile(
  r"^(\s*(?:ROOT\s+)?%\S+\s*=\s*\S+\s+parameter\((\d+)\))"
)
_SHARDING = re.compile(r"sharding=(\{(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\})")
_MESH = re.compile(r"mesh\[([^\]]*)\]")
_MESH_AXIS = re.compile(r"'([^']+)'\s*=\s*(\d+)")
_DIMS = re.compile(r"\[(\{[^\]]*\})\]")
_AXIS_NAME = re.compile(r"'([^']+)'")


def _entry_lines(text: str) -> tuple[int, int] | None:
  """The first and one-past-last line numbers of the ENTRY computation."""
  lines = text.splitlines()
  start = next(
    (k for k, line in enumerate(lines) if line.startswith("ENTRY ")), None
  )
  if start is None:
    return None
  end = next(
    (k for k in range(start + 1, len(lines)) if lines[k].startswith("}")),
    len(lines),
  )
  return start + 1, end


def parameters(text: str) -> dict[int, str | None]:
  """Each ENTRY parameter's sharding attribute as written (None: none)."""
  span = _entry_lines(text)
  if span is None:
    return {}
  found: dict[int, str | None] = {}
  for line in text.splitlines()[span[0] : span[1]]:
    match = _PARAMETER.match(line)
    if match is None:
      continue
    masked = mask_strings(line)[0]
    sharding = _SHARDING.search(masked)
    found[int(match.group(2))] = sharding.group(1) if sharding else None
  return found


def normalized(sharding: str) -> str | None:
  """`sharding`, in Shardy's words or GSPMD's, as one of `TILED`,
  `REPLICATED`, `PARTIAL`; None for what it does not read (a maximal or
  manual sharding, a mesh it cannot see)."""
  body = sharding.strip()
  if "devices=" in body or body.strip("{} ") == "replicated":
    return body  # GSPMD's words: the parser reads them as they are.
  mesh = _MESH.search(body)
  dims = _DIMS.search(body[mesh.end() :]) if mesh else None
  if mesh is None or dims is None or "manual" in body:
    return None
  sizes = {name: int(n) for name, n in _MESH_AXIS.findall(mesh.group(1))}
  return _split_over(sizes, _AXIS_NAME.findall(dims.group(1)))


def _split_over(sizes: dict[str, int], used: Sequence[str]) -> str | None:
  """`TILED`, `REPLICATED` or `PARTIAL` for a value split over the mesh
  axes `used` of a mesh of axis `sizes`; None where an axis is unknown."""
  if any(name not in sizes for name in used):
    return None
  split = math.prod(sizes[name] for name in used)
  if split == 1:
    return REPLICATED
  return TILED if split == math.prod(sizes.values()) else PARTIAL


def missing(text: str) -> bool:
  """Whether `text` is an SPMD module (``num_partitions`` above 1) none of
  whose entry parameters has a sharding."""
  header = text[: text.find("\n")] if "\n" in text else text
  partitions = re.search(r"num_partitions=(\d+)", mask_strings(header)[0])
  if partitions is None or int(partitions.group(1)) <= 1:
    return False
  found = parameters(text)
  return bool(found) and all(s is None for s in found.values())


def complete(text: str, shardings: dict[int, str]) -> str:
  """`text` with `shardings` (by parameter number, each a `normalized`
  one) written onto the ENTRY parameters that have none."""
  span = _entry_lines(text)
  if span is None or not shardings:
    return text
  lines = text.splitlines(keepends=True)
  for k in range(span[0], span[1]):
    match = _PARAMETER.match(lines[k])
    if match is None or "sharding=" in mask_strings(lines[k])[0]:
      continue
    sharding = shardings.get(int(match.group(2)))
    if sharding is not None:
      head = match.group(1)
      lines[k] = f"{head}, sharding={sharding}{lines[k][len(head) :]}"
  return "".join(lines)


def from_text(before: str) -> dict[int, str]:
  """The normalized shardings of the ENTRY parameters of `before` (the
  module before optimization)."""
  found = {}
  for number, sharding in parameters(before).items():
    words = normalized(sharding) if sharding is not None else None
    if words is not None:
      found[number] = words
  return found


def from_compiled(compiled: Any, count: int) -> dict[int, str]:
  """The normalized shardings of a ``jax.stages.Compiled``'s inputs, by
  entry parameter number, when its flat inputs are the module's `count`
  entry parameters one for one (else none: a parameter JAX pruned would
  shift them): fully replicated ones of any kind, and the split of a
  ``NamedSharding``, whose mesh and spec say it."""
  import jax

  try:
    flat = jax.tree_util.tree_leaves(compiled.input_shardings)
  except Exception:  # A Compiled without them: nothing is claimed.
    return {}
  if len(flat) != count:
    return {}
  found = {}
  for number, sharding in enumerate(flat):
    words = _named(sharding)
    if words is not None:
      found[number] = words
  return found


def _named(sharding: Any) -> str | None:
  import jax

  if getattr(sharding, "is_fully_replicated", False) is True:
    return REPLICATED  # Any kind of sharding says this much.
  if not isinstance(sharding, jax.sharding.NamedSharding):
    return None
  used: list[str] = []
  for entry in sharding.spec:
    names: Sequence[Any] = entry if isinstance(entry, tuple) else (entry,)
    used += [n for n in names if n is not None]
  return _split_over(dict(sharding.mesh.shape), used)
