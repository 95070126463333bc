"""Tuple elements written as operands: ``%t#k`` and ``%t#k#j``.

From jaxlib 0.11 on, XLA's text dumps print a get-tuple-element as a
suffix of the operand that uses it (``%while.6#1`` is element 1 of
``%while.6``; ``%p#1#0`` is element 0 of element 1 of ``%p``) and leave
the get-tuple-element instruction out (``--xla_dump_compact_gte``, on by
default; ``Compiled.as_text()`` still writes the instructions out). Every
later stage reads tuple elements from get-tuple-element instructions, so
`expand` puts them back: one instruction per distinct compact operand of
a computation, named as the operand is written (``while.6#1``, a name XLA
never gives an instruction), just before its first user. The dump of one
program then reads exactly as its explicit form does, but for those names
and the metadata XLA gives the instructions it prints.
"""

from __future__ import annotations

from collections.abc import Callable

from entangle_jax.testing._hlo.instruction import Instruction

SEPARATOR = "#"
"""Between a tuple's name and an element's index in a compact operand."""


def is_compact(operand: str) -> bool:
  """Whether `operand` names a tuple element (``t#k``)."""
  return SEPARATOR in operand


def tuple_elements(shape: str) -> list[str] | None:
  """The element shapes of tuple shape `shape` (``(s32[], (f32[2]{0},
  token[]))``), in order; None when `shape` is not a tuple."""
  shape = shape.strip()
  if not (shape.startswith("(") and shape.endswith(")")):
    return None
  inner = shape[1:-1]
  elements: list[str] = []
  depth = 0
  start = 0
  for position, char in enumerate(inner):
    if char in "([{":
      depth += 1
    elif char in ")]}":
      depth -= 1
    elif char == "," and depth == 0:
      elements.append(inner[start:position].strip())
      start = position + 1
  last = inner[start:].strip()
  if last or elements:
    elements.append(last)
  return elements


def expand(
  instructions: list[Instruction],
  error: Callable[[Instruction, str], ValueError],
) -> list[Instruction]:
  """The computation `instructions` (in text order) with a
  get-tuple-element instruction for each distinct compact operand, placed
  just before the first instruction that uses it.

  Args:
    instructions: one computation's instructions, as read.
    error: builds the ValueError for a bad operand of an instruction.

  Raises:
    ValueError: a compact operand names an instruction the computation
      does not define, one whose result is not a tuple, or an element the
      tuple does not have.
  """
  if not any(is_compact(o) for i in instructions for o in i.operands):
    return instructions
  shapes = {i.name: i.shape for i in instructions}
  expanded: list[Instruction] = []
  for instruction in instructions:
    for operand in instruction.operands:
      if is_compact(operand) and operand not in shapes:
        _add_elements(operand, instruction, shapes, expanded, error)
    expanded.append(instruction)
  return expanded


def _add_elements(
  operand: str,
  user: Instruction,
  shapes: dict[str, str],
  expanded: list[Instruction],
  error: Callable[[Instruction, str], ValueError],
) -> None:
  """Appends the get-tuple-elements that compact `operand` of `user`
  stands for, outermost first (``t#1`` before ``t#1#0``), each once."""
  base, *indices = operand.split(SEPARATOR)
  if base not in shapes:
    raise error(
      user,
      f"operand %{operand} is element {SEPARATOR.join(indices)} of %{base}, "
      f"which is not defined in computation %{user.computation}",
    )
  name = base
  for index in indices:
    element = f"{name}{SEPARATOR}{index}"
    if element not in shapes:
      elements = tuple_elements(shapes[name])
      if elements is None:
        raise error(
          user,
          f"operand %{operand} takes element {index} of %{name}, whose "
          f"result {shapes[name]} is not a tuple",
        )
      if int(index) >= len(elements):
        raise error(
          user,
          f"operand %{operand} takes element {index} of %{name}, whose "
          f"result {shapes[name]} has {len(elements)} element(s)",
        )
      shapes[element] = elements[int(index)]
      expanded.append(
        Instruction(
          name=element,
          computation=user.computation,
          opcode="get-tuple-element",
          operands=(name,),
          shape=elements[int(index)],
          tuple_index=int(index),
          line=user.line,
        )
      )
    name = element
