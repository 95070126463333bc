"""A small parser for the textual HLO that ``Compiled.as_text()`` prints.

It keeps only what ordering questions need: each instruction's operands,
control predecessors, called computations, custom-call target, side-effect
flag and ``op_name`` metadata.
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
_TARGET = re.compile(r'\bcustom_call_target="((?:[^"\\]|\\.)*)"')
_OP_NAME = re.compile(r'\bop_name="((?:[^"\\]|\\.)*)"')
_SIDE_EFFECT = re.compile(r"\bcustom_call_has_side_effect=true\b")
_ALIASING = re.compile(r"\boutput_to_operand_aliasing=\{")

# Opcodes whose parenthesised text is a literal or an index, not operands.
_NO_OPERANDS = frozenset({"constant", "parameter", "iota", "rng-bit-generator"})


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
  side_effect: bool
  aliases_operands: bool


@dataclasses.dataclass
class Module:
  """Computations by name (instructions in text order) and the entry's name."""

  computations: dict[str, list[Instruction]]
  entry: str


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


def _parse_instruction(line: str, computation: str) -> tuple[Instruction, str]:
  """Parses one instruction; operand names are resolved by the caller."""
  head = _INSTRUCTION.match(line)
  assert head is not None
  pos = _skip_shape(line, head.end())
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
  instruction = Instruction(
    name=head.group(2),
    computation=computation,
    opcode=opcode,
    operands=(),
    control_predecessors=_names(control.group(1)) if control else (),
    callees=tuple(dict.fromkeys(callees)),
    target=target.group(1) if target else None,
    op_name=op_name.group(1) if op_name else "",
    side_effect=bool(_SIDE_EFFECT.search(attrs)),
    aliases_operands=bool(_ALIASING.search(attrs)),
  )
  return instruction, operand_text


def parse(text: str) -> Module:
  """Parses HLO module text into computations of instructions."""
  computations: dict[str, list[Instruction]] = {}
  operand_texts: dict[tuple[str, str], str] = {}
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
      continue
    if line.startswith("}"):
      current = None
      continue
    if _INSTRUCTION.match(line):
      instruction, operand_text = _parse_instruction(line, current)
      computations[current].append(instruction)
      operand_texts[(current, instruction.name)] = operand_text
  if entry is None:
    raise ValueError("no ENTRY computation found in the HLO text")
  for name, instructions in computations.items():
    known = {i.name for i in instructions}
    computations[name] = [
      dataclasses.replace(
        i,
        operands=tuple(
          n for n in _names(operand_texts[(name, i.name)]) if n in known
        ),
        control_predecessors=tuple(
          n for n in i.control_predecessors if n in known
        ),
      )
      for i in instructions
    ]
  return Module(computations=computations, entry=entry)
