"""One line of optimized HLO text: an `Instruction`, reduced to what ordering
needs.

Each line is read with a few regular expressions in time linear in its
length. Quoted strings (``op_name``, targets, backend configs) are masked
before any attribute is looked up, so no scope name can pose as an
attribute. What cannot be read raises ``ValueError`` naming the line.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable

_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)
_HEAD = re.compile(r"(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-]*)\(")
_PAREN = re.compile(r"[()]")
_COMMENT = re.compile(r"/\*.*?\*/")
_OPERAND = re.compile(r"%([\w.\-]+)")
_BARE_OPERAND = re.compile(r"\s*([\w.\-]+)\s*")
_NAME_LIST = re.compile(r"%?([\w.\-]+)")
_INDEX = re.compile(r"\s*,\s*index=(\d+)")
_ALIASED_OPERAND = re.compile(r"\(\s*(\d+)\s*,")
_ARRAY_DIMS = re.compile(r"\b[a-z]+[0-9a-z]*\[([^\]]*)\]")
_ESCAPE = re.compile(rb"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.DOTALL)
_SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r"}
# One ``key=value`` attribute after the operands: a masked string, a brace
# group (with one level of nesting, as in output_to_operand_aliasing={{0}:
# (1, {})}) or a bare word.
_ATTRIBUTE = re.compile(
  r'(?:^|,)\s*([\w\-]+)=("\d+"|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}|[^,\s{}]+)'
)
_METADATA_FIELD = re.compile(r'(\w+)=("\d+"|[^\s"{}]+)')
# Attributes that name called computations: a loop's condition first.
_CALLEE_KEYS = (
  "condition",
  "body",
  "calls",
  "to_apply",
  "true_computation",
  "false_computation",
  "branch_computations",
  "called_computations",
)
# Opcodes whose parenthesised text is a literal or an index, not operands.
_NO_OPERANDS = frozenset({"constant", "parameter", "iota"})

Stack = tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True)
class Instruction:
  """One HLO instruction, reduced to what ordering needs."""

  name: str
  computation: str
  opcode: str
  operands: tuple[str, ...]
  control_predecessors: tuple[str, ...]
  callees: tuple[str, ...]
  """Called computations as the text names them; a loop's condition first,
  a conditional's branches in branch order."""
  target: str | None
  op_name: str
  aliased_operands: tuple[int, ...] = ()
  """Operand indices that results alias (``output_to_operand_aliasing``)."""
  shape: str = ""
  tuple_index: int | None = None
  parameter_number: int | None = None
  """``N`` of ``parameter(N)``."""
  side_effect: bool = False
  """``custom_call_has_side_effect=true``."""
  source: tuple[str, int] | None = None
  """Python ``(file, line)`` that created the op, innermost frame first."""
  stack: Stack = ()
  """The whole Python stack of the op, innermost frame first, if known."""
  root: bool = False
  """Whether this is its computation's ROOT."""
  branches: tuple[str, ...] = ()
  """A conditional's branch computations in branch order, repeats kept:
  branch ``k`` runs on operand ``k + 1`` (for a predicate, the true
  computation is branch 0)."""
  body: str | None = None
  """A while loop's body computation."""
  condition: str | None = None
  """A while loop's condition computation."""
  line: int = 0
  """The 1-based line of the module text it was read from."""

  @property
  def zero_sized(self) -> bool:
    """Whether the result holds no bytes (every array in it has a 0 dim)."""
    return _zero_sized(self.shape)


@functools.lru_cache(maxsize=4096)
def _zero_sized(shape: str) -> bool:
  dims = _ARRAY_DIMS.findall(shape)
  if not dims or "token[" in shape:
    return False
  return all("0" in (d.strip() for d in group.split(",")) for group in dims)


def unescape(text: str) -> str:
  """Decodes an HLO string literal's escapes (octal bytes, ``\\"``...)."""
  if "\\" not in text:
    return text

  def one(match: re.Match) -> bytes:
    octal, hexa, char = match.groups()
    if octal is not None:
      return bytes([int(octal, 8) & 0xFF])
    if hexa is not None:
      return bytes([int(hexa, 16)])
    return _SIMPLE_ESCAPES.get(char, char)

  raw = _ESCAPE.sub(one, text.encode("utf-8"))
  return raw.decode("utf-8", errors="replace")


def line_error(number: int, line: str, why: str) -> ValueError:
  """A ValueError that says what is wrong with line `number`, and shows it."""
  shown = line.strip()
  if len(shown) > 160:
    shown = shown[:157] + "..."
  return ValueError(f"HLO text, line {number}: {why}: {shown!r}")


def mask_strings(text: str) -> tuple[str, list[str]]:
  """`text` with each quoted string replaced by ``"<its index>"``."""
  if '"' not in text:
    return text, []
  strings: list[str] = []

  def keep(match: re.Match) -> str:
    strings.append(match.group(1))
    return f'"{len(strings) - 1}"'

  return _QUOTED.sub(keep, text), strings


def parse_instruction(
  line: str,
  number: int,
  computation: str,
  stack_of: Callable[[int], Stack],
) -> Instruction:
  """Reads one stripped instruction line.

  Args:
    line: the line, without leading or trailing whitespace.
    number: its 1-based line number, for errors.
    computation: the name of the computation it belongs to.
    stack_of: the Python stack of a ``stack_frame_id``.
  """
  head = _HEAD.match(line)
  if head is None:
    raise line_error(number, line, "expected `%name = shape opcode(...)`")
  shape_end = _shape_end(line, head.end(), number)
  opcode_match = _OPCODE.match(line, shape_end)
  if opcode_match is None:
    raise line_error(number, line, "expected an opcode and `(` after the shape")
  opcode = opcode_match.group(1)
  start = opcode_match.end()
  close = line.find(")", start) + 1
  if close == 0 or "(" in line[start:close]:  # Parentheses inside: count.
    close = _matching_paren(line, start - 1)
    if close < 0:
      raise line_error(number, line, "unbalanced parentheses in the operands")
  inside = line[start : close - 1]
  parameter_number = None
  if opcode == "parameter":
    if not inside.strip().isdigit():
      raise line_error(number, line, "expected parameter(N)")
    parameter_number = int(inside)
  masked, strings = mask_strings(line[close:])
  fields = _Fields(dict(_ATTRIBUTE.findall(masked)), strings)
  tuple_index = None
  if opcode == "get-tuple-element":
    index = _INDEX.match(masked)
    if index is None:
      raise line_error(number, line, "a get-tuple-element needs `index=N`")
    tuple_index = int(index.group(1))
  frame = fields.metadata_int("stack_frame_id")
  source = fields.source()
  stack = stack_of(frame) if frame is not None else ()
  if not stack and source is not None:
    stack = (source,)
  return Instruction(
    name=head.group(2),
    computation=computation,
    opcode=opcode,
    operands=()
    if opcode in _NO_OPERANDS
    else _operand_names(inside, number, line),
    control_predecessors=fields.names("control-predecessors"),
    callees=fields.callees(),
    target=fields.string("custom_call_target"),
    op_name=fields.metadata_string("op_name") or "",
    aliased_operands=fields.aliased_operands(),
    shape=line[head.end() : shape_end],
    tuple_index=tuple_index,
    parameter_number=parameter_number,
    side_effect=fields.word("custom_call_has_side_effect") == "true",
    source=stack[0] if stack else None,
    stack=stack,
    root=bool(head.group(1)),
    branches=fields.branches() if opcode == "conditional" else (),
    body=fields.callee("body"),
    condition=fields.callee("condition"),
    line=number,
  )


def _shape_end(line: str, start: int, number: int) -> int:
  """Where the result shape that begins at `start` ends."""
  if line.startswith("(", start):  # A tuple shape: (f32[], (s32[], ...)).
    end = _matching_paren(line, start)
    if end < 0:
      raise line_error(number, line, "unbalanced parentheses in the shape")
    return end
  end = line.find(" ", start)  # An array shape has no spaces.
  return len(line) if end < 0 else end


def _matching_paren(text: str, start: int) -> int:
  """Index just past the ``)`` that closes the ``(`` at ``text[start]``."""
  depth = 0
  for match in _PAREN.finditer(text, start):
    depth += 1 if match.group() == "(" else -1
    if depth == 0:
      return match.end()
  return -1


def _operand_names(text: str, number: int, line: str) -> tuple[str, ...]:
  if "/*" in text:  # XLA writes /*index=5*/ into long operand lists.
    text = _COMMENT.sub("", text)
  if "%" in text:
    return tuple(_OPERAND.findall(text))
  names = []
  for part in text.split(","):
    if not part.strip():
      continue
    bare = _BARE_OPERAND.fullmatch(part)
    if bare is None:
      raise line_error(number, line, f"cannot read operand {part.strip()!r}")
    names.append(bare.group(1))
  return tuple(names)


class _Fields:
  """Typed access to an instruction's ``key=value`` attributes."""

  def __init__(self, attributes: dict[str, str], strings: list[str]):
    self._attributes = attributes
    self._strings = strings
    self._metadata: dict[str, str] | None = None

  def word(self, key: str) -> str | None:
    return self._attributes.get(key)

  def string(self, key: str) -> str | None:
    return self._unquote(self._attributes.get(key))

  def _unquote(self, value: str | None) -> str | None:
    if value is None or not value.startswith('"'):
      return None
    return unescape(self._strings[int(value[1:-1])])

  def names(self, key: str) -> tuple[str, ...]:
    value = self._attributes.get(key)
    return tuple(_NAME_LIST.findall(value)) if value else ()

  def callee(self, key: str) -> str | None:
    value = self._attributes.get(key)
    return value.lstrip("%") if value else None

  def callees(self) -> tuple[str, ...]:
    keys = [key for key in _CALLEE_KEYS if key in self._attributes]
    if not keys:
      return ()
    found = [name for key in keys for name in self.names(key)]
    return tuple(dict.fromkeys(found))

  def branches(self) -> tuple[str, ...]:
    if "branch_computations" in self._attributes:
      return self.names("branch_computations")
    true, false = (
      self.callee("true_computation"),
      self.callee("false_computation"),
    )
    return (true, false) if true and false else ()

  def aliased_operands(self) -> tuple[int, ...]:
    value = self._attributes.get("output_to_operand_aliasing")
    if not value:
      return ()
    return tuple(sorted({int(n) for n in _ALIASED_OPERAND.findall(value)}))

  def _metadata_fields(self) -> dict[str, str]:
    if self._metadata is None:
      value = self._attributes.get("metadata", "")
      self._metadata = dict(_METADATA_FIELD.findall(value))
    return self._metadata

  def metadata_string(self, key: str) -> str | None:
    return self._unquote(self._metadata_fields().get(key))

  def metadata_int(self, key: str) -> int | None:
    value = self._metadata_fields().get(key)
    return int(value) if value and value.isdigit() else None

  def source(self) -> tuple[str, int] | None:
    file = self.metadata_string("source_file")
    line = self.metadata_int("source_line")
    return (file, line) if file is not None and line is not None else None
