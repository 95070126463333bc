"""A small parser for the textual HLO that ``Compiled.as_text()`` prints.

It keeps only what ordering questions need: each instruction's operands,
control predecessors, called computations, custom-call target, side-effect
flag, aliased operands, result shape, tuple index, ``op_name`` metadata and
Python source location (``source_file``/``source_line`` metadata, or the
module's ``StackFrames`` table that newer XLA prints instead).
"""

from __future__ import annotations

import dataclasses
import re

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*[({]")
_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([\w\-]+)\(")
_NAME = re.compile(r"%?([A-Za-z_][\w.\-]*)")
_ONE_CALLEE = re.compile(
  r"\b(?:calls|to_apply|body|condition|true_computation|false_computation)"
  r"=%?([\w.\-]+)"
)
_MANY_CALLEES = re.compile(
  r"\b(?:calls|branch_computations|called_computations)=\{([^}]*)\}"
)
_CONTROL = re.compile(r"\bcontrol-predecessors=\{([^}]*)\}")
_QUOTED = r'"((?:[^"\\]|\\.)*)"'
_TARGET = re.compile(r"\bcustom_call_target=" + _QUOTED)
_OP_NAME = re.compile(r"\bop_name=" + _QUOTED)
_SOURCE_FILE = re.compile(r"\bsource_file=" + _QUOTED)
_SOURCE_LINE = re.compile(r"\bsource_line=(\d+)")
_STACK_FRAME = re.compile(r"\bstack_frame_id=(\d+)")
_BODY = re.compile(r"\bbody=%?([\w.\-]+)")
_TUPLE_INDEX = re.compile(r"^,\s*index=(\d+)")
_ALIASING = re.compile(r"\boutput_to_operand_aliasing=(?=\{)")
# In the aliasing map ``{{0}: (1, {}), ...}``, each ``(operand index, ...``.
_ALIASED_OPERAND = re.compile(r"\(\s*(\d+)\s*,")
_ESCAPE = re.compile(rb"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.DOTALL)
_SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r"}
_ARRAY_DIMS = re.compile(r"\b[a-z]+[0-9a-z]*\[([^\]]*)\]")

# Opcodes whose parenthesised text is a literal or an index, not operands.
_NO_OPERANDS = frozenset({"constant", "parameter", "iota", "rng-bit-generator"})

# The StackFrames table: "<id> {file_location_id=<n> parent_frame_id=<n>}".
_TABLE_ROW = re.compile(r"^(\d+)\s+(.*)$")
_FIELD = re.compile(r"(\w+)=(\d+)")


@dataclasses.dataclass(frozen=True)
class Instruction:
  """One HLO instruction, reduced to what ordering needs."""

  name: str
  computation: str
  opcode: str
  operands: tuple[str, ...]
  control_predecessors: tuple[str, ...]
  callees: tuple[str, ...]
  target: str | None
  op_name: str
  aliased_operands: tuple[int, ...] = ()
  """Operand indices that results alias (``output_to_operand_aliasing``)."""
  shape: str = ""
  tuple_index: int | None = None
  source: tuple[str, int] | None = None
  """Python ``(file, line)`` that created the op, innermost frame first."""
  stack: tuple[tuple[str, int], ...] = ()
  """The whole Python stack of the op, innermost frame first, if known."""
  root: bool = False
  """Whether this is its computation's ROOT."""
  body: str | None = None
  """A while loop's body computation."""

  @property
  def zero_sized(self) -> bool:
    """Whether the result holds no bytes (every array in it has a 0 dim)."""
    dims = _ARRAY_DIMS.findall(self.shape)
    if not dims or "token[" in self.shape:
      return False
    return all("0" in (d.strip() for d in group.split(",")) for group in dims)


@dataclasses.dataclass
class Module:
  """Computations by name (instructions in text order) and the entry's name."""

  computations: dict[str, list[Instruction]]
  entry: str


def unescape(text: str) -> str:
  """Decodes an HLO string literal's escapes (octal bytes, ``\\"``...)."""

  def one(match: re.Match) -> bytes:
    octal, hexa, char = match.groups()
    if octal is not None:
      return bytes([int(octal, 8) & 0xFF])
    if hexa is not None:
      return bytes([int(hexa, 16)])
    return _SIMPLE_ESCAPES.get(char, char)

  raw = _ESCAPE.sub(one, text.encode("utf-8"))
  return raw.decode("utf-8", errors="replace")


def _balanced_end(text: str, start: int) -> int:
  """Index just past the bracket group that opens at ``text[start]``."""
  pairs = {"(": ")", "[": "]", "{": "}"}
  stack = []
  quoted = False
  for i in range(start, len(text)):
    c = text[i]
    if quoted:
      quoted = c != '"' or text[i - 1] == "\\"
    elif c == '"':
      quoted = True
    elif c in pairs:
      stack.append(pairs[c])
    elif stack and c == stack[-1]:
      stack.pop()
      if not stack:
        return i + 1
  return len(text)


def _skip_shape(text: str, pos: int) -> int:
  while pos < len(text) and text[pos] == " ":
    pos += 1
  if pos < len(text) and text[pos] == "(":
    return _balanced_end(text, pos)
  while pos < len(text) and text[pos] != " ":
    pos += 1
  return pos


def _names(text: str) -> tuple[str, ...]:
  return tuple(_NAME.findall(text))


class _StackFrames:
  """The module's ``FileNames``/``FileLocations``/``StackFrames`` tables."""

  def __init__(self):
    self.tables: dict[str, dict[int, str]] = {}

  def add(self, table: str, line: str) -> None:
    row = _TABLE_ROW.match(line.strip())
    if row:
      self.tables.setdefault(table, {})[int(row.group(1))] = row.group(2)

  def stack(self, frame_id: int) -> tuple[tuple[str, int], ...]:
    files = self.tables.get("FileNames", {})
    locations = self.tables.get("FileLocations", {})
    frames = {
      n: dict((k, int(v)) for k, v in _FIELD.findall(text))
      for n, text in self.tables.get("StackFrames", {}).items()
    }
    # XLA prints each frame's parent shifted by one (1 means "no parent"),
    # so a frame can appear to be its own parent. Detect that convention
    # rather than trust either.
    shift = int(
      any(f.get("parent_frame_id", 0) >= n for n, f in frames.items())
    )
    stack = []
    seen = set()
    while frame_id in frames and frame_id not in seen:
      seen.add(frame_id)
      frame = frames[frame_id]
      location = dict(
        (k, int(v))
        for k, v in _FIELD.findall(locations.get(frame["file_location_id"], ""))
      )
      name = files.get(location.get("file_name_id", -1), "")
      if name.startswith('"'):
        name = unescape(name.strip()[1:-1])
      if name and "line" in location:
        stack.append((name, location["line"]))
      frame_id = frame.get("parent_frame_id", 0) - shift
    return tuple(stack)


def _aliased_operands(attrs: str) -> tuple[int, ...]:
  aliasing = _ALIASING.search(attrs)
  if aliasing is None:
    return ()
  text = attrs[aliasing.end() : _balanced_end(attrs, aliasing.end())]
  return tuple(sorted({int(n) for n in _ALIASED_OPERAND.findall(text)}))


def _parse_instruction(line: str, computation: str) -> tuple[Instruction, str]:
  """Parses one instruction; operand names are resolved by the caller."""
  head = _INSTRUCTION.match(line)
  assert head is not None
  pos = _skip_shape(line, head.end())
  shape = line[head.end() : pos].strip()
  opcode_match = _OPCODE.match(line, pos)
  if opcode_match is None:
    raise ValueError(f"unparsable HLO instruction: {line.strip()}")
  open_paren = opcode_match.end() - 1
  close = _balanced_end(line, open_paren)
  opcode = opcode_match.group(1)
  operand_text = (
    "" if opcode in _NO_OPERANDS else line[open_paren + 1 : close - 1]
  )
  attrs = line[close:]
  callees = list(_ONE_CALLEE.findall(attrs))
  for group in _MANY_CALLEES.findall(attrs):
    callees.extend(_names(group))
  control = _CONTROL.search(attrs)
  target = _TARGET.search(attrs)
  op_name = _OP_NAME.search(attrs)
  source_file = _SOURCE_FILE.search(attrs)
  source_line = _SOURCE_LINE.search(attrs)
  index = _TUPLE_INDEX.match(attrs) if opcode == "get-tuple-element" else None
  body = _BODY.search(attrs) if opcode == "while" else None
  instruction = Instruction(
    name=head.group(2),
    computation=computation,
    opcode=opcode,
    operands=(),
    control_predecessors=_names(control.group(1)) if control else (),
    callees=tuple(dict.fromkeys(callees)),
    target=unescape(target.group(1)) if target else None,
    op_name=unescape(op_name.group(1)) if op_name else "",
    aliased_operands=_aliased_operands(attrs),
    shape=shape,
    tuple_index=int(index.group(1)) if index else None,
    root=bool(head.group(1)),
    body=body.group(1) if body else None,
    source=(
      (unescape(source_file.group(1)), int(source_line.group(1)))
      if source_file and source_line
      else None
    ),
  )
  return instruction, operand_text


def parse(text: str) -> Module:
  """Parses HLO module text into computations of instructions."""
  computations: dict[str, list[Instruction]] = {}
  operand_texts: dict[tuple[str, str], str] = {}
  frame_ids: dict[tuple[str, str], int] = {}
  frames = _StackFrames()
  table = None
  entry = None
  current = None
  for line in text.splitlines():
    if current is None:
      header = _COMPUTATION.match(line)
      if header and line.rstrip().endswith("{"):
        current = header.group(2)
        computations[current] = []
        if header.group(1):
          entry = current
        table = None
      elif line.strip() in (
        "FileNames",
        "FunctionNames",
        "FileLocations",
        "StackFrames",
      ):
        table = line.strip()
      elif table is not None:
        frames.add(table, line)
      continue
    if line.startswith("}"):
      current = None
      continue
    if _INSTRUCTION.match(line):
      instruction, operand_text = _parse_instruction(line, current)
      computations[current].append(instruction)
      operand_texts[(current, instruction.name)] = operand_text
      frame = _STACK_FRAME.search(line[line.rfind("metadata=") :])
      if frame and "metadata=" in line:
        frame_ids[(current, instruction.name)] = int(frame.group(1))
  if entry is None:
    hint = (
      " This looks like StableHLO (Lowered.as_text()): pass the Lowered or "
      "Compiled object, or Compiled.as_text()."
      if "stablehlo." in text or "func.func" in text
      else ""
    )
    raise ValueError("no ENTRY computation found in the HLO text." + hint)
  for name, instructions in computations.items():
    known = {i.name for i in instructions}
    resolved = []
    for i in instructions:
      stack = ()
      if (name, i.name) in frame_ids:
        stack = frames.stack(frame_ids[(name, i.name)])
      elif i.source is not None:
        stack = (i.source,)
      resolved.append(
        dataclasses.replace(
          i,
          operands=tuple(
            n for n in _names(operand_texts[(name, i.name)]) if n in known
          ),
          control_predecessors=tuple(
            n for n in i.control_predecessors if n in known
          ),
          stack=stack,
          source=stack[0] if stack else None,
        )
      )
    computations[name] = resolved
  return Module(computations=computations, entry=entry)
