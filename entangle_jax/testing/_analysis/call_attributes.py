"""What a communicating call's HLO line says, read for the cross-rank
check (`ranks.RankProgram`): its attributes (``backend_config``'s FFI
attributes, raw attribute text), an MPI handle's identity across processes
(`handle_told`), the arrays of a message as MPI matches them (`arrays`),
how many devices a collective's replica groups span (`group_count`), and
which peer is MPI_PROC_NULL (`null_peer`)."""

from __future__ import annotations

import re


def strip_layout(shape: str) -> str:
  return re.sub(r"\{[^{}]*\}", "", shape)


def raw_attribute(line: str, key: str) -> str | None:
  """The text of attribute `key` of an instruction line (balanced braces
  and brackets; quoted strings kept whole); None when it has none."""
  found = re.search(rf"[,\s]{re.escape(key)}=", line)
  if found is None:
    return None
  start = index = found.end()
  depth = 0
  quoted = False
  while index < len(line):
    char = line[index]
    if quoted:
      if char == "\\":
        index += 1
      elif char == '"':
        quoted = False
    elif char == '"':
      quoted = True
    elif char in "{[(":
      depth += 1
    elif char in "}])":
      depth -= 1
      if depth < 0:
        break
    elif char == "," and depth == 0:
      break
    index += 1
  return line[start:index].strip()


_CONFIG_ENTRY = re.compile(
  r"([A-Za-z_][\w.]*)\s*=\s*(\"(?:[^\"\\]|\\.)*\"|[^,:}]+?)\s*(?::\s*[\w<>]+)?"
  r"\s*(?=,|$)"
)


def backend_attributes(line: str) -> dict[str, str]:
  """An FFI call's attributes, as ``backend_config={name = 1 : i64, ...}``
  writes them: name to value text."""
  raw = raw_attribute(line, "backend_config")
  if raw is None or not raw.startswith("{"):
    return {}
  return {
    m.group(1): m.group(2).strip() for m in _CONFIG_ENTRY.finditer(raw[1:-1])
  }


def as_int(text: object) -> int | None:
  if isinstance(text, int):
    return text
  if isinstance(text, str):
    try:
      return int(text.strip())
    except ValueError:
      return None
  return None


_LIBRARY_SPAN = 1 << 24
"""Two handles of one call closer than this (16 MiB) are taken to lie in
one library's data, whose layout is the same in every process."""


def handle_told(
  value: object, attributes: dict[str, str], communicator: object
) -> str | None:
  """What tells an MPI handle (a reduction's, at attribute or operand
  value `value`) apart across processes, where its value shows it:

  * a 32-bit value is a constant of the MPI library (MPICH's handles are
    such ints), the same in every process;
  * an address (Open MPI's handles are the addresses of its predefined
    objects, which each process maps elsewhere) is told by its distance
    to another handle of the same call in the same library's data (the
    element type's): that distance is the library's layout, the same in
    every process, and two different reductions of one element type lie
    at different distances. The communicator is never the other handle
    (one a process made lies on its heap).

  None where neither holds (a reduction the program created): it is then
  compared up to a consistent renaming only."""
  handle = as_int(value)
  if handle is None:
    return None
  if 0 <= handle < 1 << 32:
    return f"{handle:#x}"
  for name in sorted(attributes):
    if name == communicator:
      continue
    other = as_int(attributes[name])
    if (
      other is not None
      and other != handle
      and other >= 1 << 32
      and abs(handle - other) < _LIBRARY_SPAN
    ):
      return f"{handle - other:+d} from `{name}`"
  return None


def arrays(shapes: str) -> str:
  """The arrays of HLO shape text `shapes` (a tuple's too), each as MPI
  matches it (`_counted`), tokens left out: ``(f32[2,2]{1,0}, token[])``
  is ``f32[4]``."""
  found = re.findall(r"\w+\[[^\]]*\]", strip_layout(shapes))
  return ", ".join(_counted(x) for x in found if not x.startswith("token"))


def _counted(shape: str) -> str:
  """An array type as MPI matches it: its element type and count
  (``f32[2,2]`` is ``f32[4]``, ``f32[]`` is ``f32[1]``); other text as
  it is."""
  found = re.fullmatch(r"(\w+)\[([\d,\s]*)\]", shape)
  if found is None:
    return shape
  count = 1
  for dim in found.group(2).split(","):
    if dim.strip():
      count *= int(dim)
  return f"{found.group(1)}[{count}]"


def pairs_as_set(pairs: str) -> str:
  """A ``source_target_pairs=`` value with its pairs in one order: a
  permutation is a set of pairs (``{{1,0},{0,1}}`` is ``{{0,1},{1,0}}``);
  text that is not a list of pairs stays as it is."""
  found = re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", pairs)
  if (
    not found or re.fullmatch(r"\{\s*(\{[\d\s,]*\}\s*,?\s*)*\}", pairs) is None
  ):
    return pairs
  ordered = sorted({(int(a), int(b)) for a, b in found})
  return "{" + ",".join(f"{{{a},{b}}}" for a, b in ordered) + "}"


def group_count(groups: str | None) -> int | None:
  """How many replica groups ``replica_groups=`` writes: ``{{0,1},{2,3}}``
  is 2, ``[2,2]<=[4]`` (the iota form) is 2, ``mesh['p'=2,'d'=2] {'d'}``
  (the mesh-axes form of newer XLA: the groups reduce over the axes
  named in braces) is 2, ``{}`` or none is 1 (every device in one).
  None when the text is in no form read here: the caller must not take
  such a collective as one group."""
  if groups is None:
    return 1
  groups = groups.strip()
  if groups.startswith("mesh"):
    return _mesh_group_count(groups)
  iota = re.match(r"\[(\d+)\s*,", groups)
  if iota is not None:
    return int(iota.group(1))
  if not groups.startswith("{"):
    return None
  inner = groups[1:-1].strip()
  return max(1, inner.count("{"))


_MESH_AXIS = re.compile(r"\s*'([^']*)'\s*=\s*(\d+)\s*")


_DEVICE_ORDER = re.compile(r"(<=\s*\[[\d,\s]*\]\s*)?(T\([\d,\s]*\))?")


_REDUCED_AXIS = re.compile(
  r"\s*'([^']*)'\s*(?::\s*\(\s*(\d+)\s*\)\s*(\d+))?\s*"
)


def _mesh_group_count(groups: str) -> int | None:
  """The group count of the mesh-axes form ``mesh['p'=2,'d'=2] {'d'}``:
  the mesh's devices over those of one group (the product of the axes in
  braces; a sub-axis ``'d':(1)2`` counts its own size). None when any
  part is not read."""
  found = re.fullmatch(r"mesh\s*\[([^\]]*)\](.*?)\{([^{}]*)\}\s*", groups, re.S)
  if found is None:
    return None
  sizes: dict[str, int] = {}
  for part in found.group(1).split(","):
    axis = _MESH_AXIS.fullmatch(part)
    if axis is None:
      return None
    sizes[axis.group(1)] = int(axis.group(2))
  between = found.group(2).strip()
  # A device order (``<=[4]``, ``T(1,0)``) orders the devices, not how
  # many groups there are; anything else is not read.
  if between and _DEVICE_ORDER.fullmatch(between) is None:
    return None
  total = 1
  for size in sizes.values():
    total *= size
  group = 1
  named: set[str] = set()
  reduced = found.group(3).strip()
  for part in reduced.split(",") if reduced else []:
    axis = _REDUCED_AXIS.fullmatch(part)
    # An axis named twice, or a sub-axis that does not fit in its axis,
    # is not read (it could make a group of every device).
    if axis is None or axis.group(1) not in sizes or axis.group(1) in named:
      return None
    named.add(axis.group(1))
    size = sizes[axis.group(1)]
    if axis.group(3):
      pre, sub = int(axis.group(2)), int(axis.group(3))
      if pre < 1 or sub < 1 or size % (pre * sub):
        return None
      size = sub
    group *= size
  if group < 1 or total % group:
    return None
  return total // group


OPEN_MPI_PROC_NULL = -2
MPICH_PROC_NULL = -1


def null_peer(communicator: object) -> int:
  """MPI_PROC_NULL in the library that made the communicator's handle
  `communicator`: Open MPI's handles are addresses (2**32 or more) and its
  PROC_NULL is -2 (ANY_SOURCE -1); MPICH's are 32-bit values and its
  PROC_NULL is -1 (ANY_SOURCE -2). Where the handle does not tell (a
  binding that declares no communicator), Open MPI's."""
  handle = as_int(communicator)
  if handle is not None and 0 <= handle < 1 << 32:
    return MPICH_PROC_NULL
  return OPEN_MPI_PROC_NULL
