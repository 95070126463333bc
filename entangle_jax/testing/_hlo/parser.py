"""Reads the optimized, scheduled HLO module that ``Compiled.as_text()``
prints, and, when asked, the module before optimization that holds the
program's own order.

Only XLA's optimized module says what runs: after fusion, CSE, dead-code
elimination and the expansion of ``optimization_barrier``, edges that the
lowered program had may be gone. XLA marks that module ``is_scheduled=true``
on its ``HloModule`` line; `parse` refuses text without it (StableHLO,
``Lowered.as_text(dialect="hlo")``) unless told it is the module before
optimization (``optimized=False``): that module is the program as JAX
lowered it, which the race check compares with what XLA made of it
(`entangle_jax.testing._analysis.xla_changes`). Reading is linear in the
text and uses no recursion; every error is a ``ValueError`` naming a line.
Leading and trailing whitespace is ignored on every line, as XLA's own
parser ignores it.
"""

from __future__ import annotations

import dataclasses
import re

from entangle_jax.testing._hlo import (
  compact_operands,
  depth_first,
  host_callbacks,
)
from entangle_jax.testing._hlo.attributes import Stack, mask_strings, unescape
from entangle_jax.testing._hlo.instruction import (
  Instruction,
  InstructionReader,
  line_error,
)

__all__ = ["Instruction", "Module", "parse", "unescape"]

_COMPUTATION = re.compile(r"(ENTRY\s+)?%?([\w.\-]+)\s*(?:\(|\{)")
_TABLE_NAME = re.compile(r"[A-Z][A-Za-z]*")
_TABLE_ROW = re.compile(r"(\d+)\s+(.*)")
_FIELD = re.compile(r"(\w+)=(\d+)")
_SCHEDULED = re.compile(r"\bis_scheduled=true\b")
_PARTITIONS = re.compile(r"\bnum_partitions=(\d+)")
_REPLICAS = re.compile(r"\breplica_count=(\d+)")

NOT_SCHEDULED = (
  "the order analysis reads XLA's optimized, scheduled module, the one that "
  "runs (its HloModule line says is_scheduled=true), and {what}. Pass "
  "jax.jit(f).lower(*args).compile() (a jax.stages.Compiled), or its "
  ".as_text()."
)


class NotScheduledError(ValueError):
  """The text is not an optimized, scheduled module; `what` says what it
  is instead (the message wraps it in advice for a Python caller, which
  a command reading files replaces with its own)."""

  def __init__(self, what: str):
    super().__init__(NOT_SCHEDULED.format(what=what))
    self.what = what


@dataclasses.dataclass
class Module:
  """Computations by name (instructions in text order) and the entry's name."""

  computations: dict[str, list[Instruction]]
  entry: str
  devices: int = 1
  """How many devices run the module at once: its ``HloModule`` line's
  ``num_partitions`` times its ``replica_count`` (an SPMD module runs on
  every device of its mesh)."""
  partitions: int = 1
  """Its ``num_partitions``: ``partition-id`` tells this many apart."""


def parse(text: str, *, optimized: bool = True) -> Module:
  """Parses the text of an optimized, scheduled HLO module, or with
  `optimized` false, of the module before optimization (the text
  ``Lowered.as_text(dialect="hlo", debug_info=True)`` prints, or a dump's
  ``before_optimizations.txt``), whose scopes are then completed
  (`_complete_call_scopes`).

  Raises:
    TypeError: `text` is not a str.
    ValueError: the text is not a scheduled module (its ``HloModule`` line
      lacks ``is_scheduled=true``) and `optimized` is true, a line cannot
      be read, an operand or a called computation is not defined, a
      compact operand (``%t#k``, `compact_operands`) takes an element its
      tuple does not have, a name is defined twice, a computation is not
      closed, there is no ENTRY computation, or a computation calls
      itself. The message names the line.
  """
  if not isinstance(text, str):
    raise TypeError(f"expected HLO text (a str), got {type(text).__name__}")
  lines = text.splitlines()
  orders = host_callbacks.read_orders(text)

  def error(instruction: Instruction, why: str) -> ValueError:
    return line_error(instruction.line, lines[instruction.line - 1], why)

  computations: dict[str, list[Instruction]] = {}
  tables: dict[str, dict[int, str]] = {}
  reader = InstructionReader(_StackFrames(tables).stack)
  entry = None
  current: list[Instruction] | None = None
  name = ""
  table: dict[int, str] | None = None
  header_seen = False
  devices = partitions = 1
  for number, raw in enumerate(lines, 1):
    line = raw.strip()
    if line.startswith("//"):  # A comment line, which XLA's lexer skips.
      continue
    if current is not None:
      if line == "}":
        computations[name] = host_callbacks.group(
          compact_operands.expand(current, error), orders
        )
        current = None
      elif line:
        current.append(reader.read(line, number, name))
      continue
    if not line:
      table = None
    elif (
      table is not None
      and not line.endswith("{")
      and (row := _TABLE_ROW.fullmatch(line))
    ):
      # Most lines of a small module are its tables' rows. One that does
      # not end in `{` opens no computation, and no table's name (a
      # capital first) is a row (a digit first): the row, as below.
      table[int(row.group(1))] = row.group(2)
    elif not header_seen:
      _check_header(line, number, scheduled=optimized)
      header_seen = True
      devices = _devices(line)
      partitions = _count(_PARTITIONS, line)
    elif (header := _COMPUTATION.match(line)) and line.endswith("{"):
      name = header.group(2)
      if name in computations:
        raise line_error(number, raw, f"computation %{name} is defined twice")
      current = computations[name] = []
      entry = name if header.group(1) else entry
      table = None
    elif _TABLE_NAME.fullmatch(line):
      table = tables.setdefault(line, {})
    elif table is not None and (row := _TABLE_ROW.fullmatch(line)):
      table[int(row.group(1))] = row.group(2)
    else:
      raise line_error(number, raw, "expected a computation or a table row")
  if not header_seen:
    raise NotScheduledError("this text is empty")
  if current is not None:
    raise ValueError(
      f"HLO text, line {len(lines)}: computation %{name} is not closed by `}}`"
    )
  if entry is None:
    raise ValueError("HLO text: no ENTRY computation")
  _check_references(computations, lines)
  _check_no_recursion(computations, lines)
  if not optimized:
    _complete_call_scopes(computations, entry)
  return Module(computations, entry, devices, partitions)


def _count(pattern: re.Pattern, header: str) -> int:
  found = pattern.search(mask_strings(header)[0])
  return max(1, int(found.group(1))) if found else 1


def _devices(header: str) -> int:
  masked = mask_strings(header)[0]
  count = 1
  for pattern in (_PARTITIONS, _REPLICAS):
    if found := pattern.search(masked):
      count *= max(1, int(found.group(1)))
  return count


def check_header(text: str) -> None:
  """Raises ValueError unless `text` begins (after comments and blank
  lines) with the ``HloModule`` line of an optimized, scheduled module:
  the check `parse` starts with, without reading the rest."""
  for number, raw in enumerate(text.splitlines(), 1):
    line = raw.strip()
    if line and not line.startswith("//"):
      _check_header(line, number)
      return
  raise NotScheduledError("this text is empty")


def _check_header(line: str, number: int, *, scheduled: bool = True) -> None:
  if not line.startswith("HloModule"):
    what = (
      "this is StableHLO (Lowered.as_text())"
      if line.startswith(("module", "#loc", "func.func"))
      else f"line {number} is not an HloModule line: {line[:80]!r}"
    )
    raise NotScheduledError(what)
  if scheduled and not _SCHEDULED.search(mask_strings(line)[0]):
    raise NotScheduledError(
      f"line {number} lacks is_scheduled=true: this module is not "
      "optimized (Lowered.as_text(dialect='hlo') prints such a module)"
    )


def _check_references(
  computations: dict[str, list[Instruction]], lines: list[str]
) -> None:
  for name, instructions in computations.items():
    defined: set[str] = set()
    for i in instructions:
      if i.name in defined:
        raise line_error(i.line, lines[i.line - 1], f"%{i.name} defined twice")
      defined.add(i.name)
    for i in instructions:
      for operand in (*i.operands, *i.control_predecessors):
        if operand not in defined:
          raise line_error(
            i.line,
            lines[i.line - 1],
            f"operand %{operand} is not defined in computation %{name}",
          )
      for callee in i.callees:
        if callee not in computations:
          raise line_error(
            i.line, lines[i.line - 1], f"no computation is named %{callee}"
          )


def _check_no_recursion(
  computations: dict[str, list[Instruction]], lines: list[str]
) -> None:
  """Raises if a computation calls itself, directly or through others."""

  def calls(caller: str):
    return ((callee, i) for i in computations[caller] for callee in i.callees)

  def refuse(caller: str, callee: str, site: Instruction) -> None:
    raise line_error(
      site.line,
      lines[site.line - 1],
      f"computation %{callee} calls itself (here, through %{caller}); "
      "HLO has no recursion",
    )

  depth_first.post_order(computations, calls, refuse)


def _complete_call_scopes(
  computations: dict[str, list[Instruction]], entry: str
) -> None:
  """Gives the ops of computations that a ``call`` runs the scope and the
  Python stack they have in the program, in place.

  Before optimization, JAX lowers a jitted helper (or a ``custom_vjp``, a
  checkpoint) into a computation of its own whose ops' ``op_name`` and
  stack are relative to the ``call`` that runs it: ``ffi_call``, made at
  the helper's line, where the optimized module, after XLA inlined the
  call, says ``jit(f)/while/body/closed_call/ffi_call``, made at the
  helper's line called from the caller's lines. The scope is what a
  ``Resource`` records its accesses in and what selectors pick, and the
  stack names the user's line, so each such op gets its caller's in
  front of its own scope and below its own stack, as XLA's inliner gives
  them. Computations a loop or a conditional runs keep those of the
  computation that runs them; a computation called from several places
  takes the first's (the text order of the callers).
  """
  outer: dict[str, tuple[str, Stack]] = {entry: ("", ())}
  pending = [entry]
  while pending:  # Callers first: what a caller passes on is known.
    name = pending.pop()
    prefix, below = outer[name]
    body = computations[name]
    for n, i in enumerate(body):
      scope, stack = i.op_name, i.stack
      # A JAX that already writes whole scopes there is left as it is.
      if prefix and scope and not scope.startswith(f"{prefix}/"):
        scope = f"{prefix}/{scope}"
      if below and stack and stack[-len(below) :] != below:
        stack = (*stack, *below)
      if (scope, stack) != (i.op_name, i.stack):
        body[n] = dataclasses.replace(i, op_name=scope, stack=stack)
      for callee in i.callees:
        if callee in outer:
          continue
        outer[callee] = (
          (scope, stack) if i.opcode == "call" else (prefix, below)
        )
        pending.append(callee)


class _StackFrames:
  """The module's ``FileNames``/``FileLocations``/``StackFrames`` tables,
  which XLA prints before the computations (newer XLA, instead of
  ``source_file``/``source_line`` per op)."""

  def __init__(self, tables: dict[str, dict[int, str]]):
    self._tables = tables
    self._cache: dict[int, Stack] = {}
    self._whole: dict[int, Stack] = {}
    """The stacks that ended at an outermost frame (no cycle), by frame."""
    self._places: dict[int, tuple[str, int] | None] = {}
    self._frames: dict[int, dict[str, int]] | None = None
    self._shift = 0

  def stack(self, frame_id: int) -> Stack:
    if frame_id not in self._cache:
      self._cache[frame_id] = self._stack(frame_id)
    return self._cache[frame_id]

  def _read_frames(self) -> dict[int, dict[str, int]]:
    if self._frames is None:
      self._frames = {
        n: {k: int(v) for k, v in _FIELD.findall(text)}
        for n, text in self._tables.get("StackFrames", {}).items()
      }
      # XLA prints each frame's parent shifted by one (1 means "no parent"),
      # so a frame can appear to be its own parent. Detect that convention
      # rather than trust either.
      self._shift = int(
        any(f.get("parent_frame_id", 0) >= n for n, f in self._frames.items())
      )
    return self._frames

  def _stack(self, frame_id: int) -> Stack:
    frames = self._read_frames()
    walked: list[tuple[int, tuple[str, int] | None]] = []
    seen = set()
    tail: Stack = ()
    while frame_id in frames and frame_id not in seen:
      if frame_id in self._whole:
        # A stack read before that ended without a cycle: none of its
        # frames is one walked here (that would be a cycle), so the walk
        # would go on exactly as it went then.
        tail = self._whole[frame_id]
        break
      seen.add(frame_id)
      frame = frames[frame_id]
      walked.append((frame_id, self._place(frame.get("file_location_id", -1))))
      frame_id = frame.get("parent_frame_id", 0) - self._shift
    else:
      if frame_id in seen:  # A cycle: the stacks of its frames differ.
        return tuple(p for _, p in walked if p is not None)
    # Ended at an outermost frame: each frame walked has the stack from
    # it outward, kept for the walks that reach it.
    for walked_id, place in reversed(walked):
      if place is not None:
        tail = (place, *tail)
      self._whole[walked_id] = tail
    return tail

  def _place(self, location_id: int) -> tuple[str, int] | None:
    """The (file, line) of a ``FileLocations`` row, read once: every
    stack through it reads it again (deeply nested JAX code makes stacks
    of hundreds of frames, each shared by many ops)."""
    if location_id not in self._places:
      row = self._tables.get("FileLocations", {}).get(location_id, "")
      location = {k: int(v) for k, v in _FIELD.findall(row)}
      files = self._tables.get("FileNames", {})
      name = files.get(location.get("file_name_id", -1), "").strip()
      if len(name) > 1 and name.startswith('"') and name.endswith('"'):
        name = unescape(name[1:-1])
      found = (name, location["line"]) if name and "line" in location else None
      self._places[location_id] = found
    return self._places[location_id]
