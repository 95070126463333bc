"""One line of optimized HLO text: an `Instruction`, reduced to what ordering
needs.

Each line is read with a few regular expressions in time linear in its
length; the attributes after the operands are
`entangle_jax.testing._hlo.attributes`'s. What cannot be read raises
``ValueError`` naming the line.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable

from entangle_jax.testing._hlo.attributes import Stack, attribute_fields

_HEAD = re.compile(r"(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-]*)\(")
_PAREN = re.compile(r"[()]")
_COMMENT = re.compile(r"/\*.*?\*/")
# An operand: its name, and the tuple elements it takes (``%t#1#0``, as
# XLA's dumps write them from jaxlib 0.11 on: `compact_operands`).
_OPERAND = re.compile(r"%([\w.\-]+(?:#\d+)*)")
_BARE_OPERAND = re.compile(r"\s*([\w.\-]+(?:#\d+)*)\s*")
# What may stand between two operands: a comma, then the next operand's
# shape (``f32[2,3]{1,0}``), if the text writes shapes.
_BETWEEN = re.compile(r"\s*,[^%#]*")
_ARRAY_DIMS = re.compile(r"\b[a-z]+[0-9a-z]*\[([^\]]*)\]")
# Most lines at once: the head, an array shape (no spaces, no tuple) and
# the opcode, as `_HEAD`, `_shape_end` and `_OPCODE` read them one by one
# (a line this does not match is read that slower way, which names what
# is wrong with it).
_LINE = re.compile(
  r"(?>(ROOT\s+)?%?([\w.\-]+)\s*=\s*)([^\s(][^ ]*) \s*([a-z][a-z0-9\-]*)\("
)
# Operand lists of plain names, the usual case: `_percent_operands` and the
# bare names' loop would read each as the name itself.
_PLAIN_PERCENT = re.compile(r"%[\w.\-]+(?:#\d+)*(?:, %[\w.\-]+(?:#\d+)*)*")
_PLAIN_BARE = re.compile(r"[\w.\-]+(?:#\d+)*(?:, [\w.\-]+(?:#\d+)*)*")
# A get-tuple-element's index, which makes its attribute text differ from
# line to line while the rest (its metadata) repeats.
_LEADING_INDEX = re.compile(r", index=(\d+)(?=,|$)")
# Opcodes whose parenthesised text is a literal or an index, not operands.
_NO_OPERANDS = frozenset({"constant", "parameter", "iota"})


@dataclasses.dataclass(frozen=True)
class Instruction:
  """One HLO instruction, reduced to what ordering needs."""

  name: str
  computation: str
  opcode: str
  operands: tuple[str, ...]
  control_predecessors: tuple[str, ...] = ()
  callees: tuple[str, ...] = ()
  """Called computations as the text names them; a loop's condition first,
  a conditional's branches in branch order."""
  target: str | None = None
  """The custom call's target; None for any other opcode."""
  op_name: str = ""
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
  literal: str | None = None
  """A ``constant``'s literal as written (``3``, ``{0, 1}``)."""
  slice_starts: tuple[int, ...] | None = None
  """A ``slice``'s start index in each dimension."""
  slice_ranges: tuple[tuple[int, int, int], ...] | None = None
  """A ``slice``'s ``(start, limit, stride)`` in each dimension."""
  dimensions: tuple[int, ...] | None = None
  """The ``dimensions`` attribute (a ``concatenate``'s, the one it joins
  along; a ``broadcast``'s, ``transpose``'s, ``reduce``'s...), or an
  ``iota``'s ``iota_dimension``."""
  gather_dims: tuple | None = None
  """A ``gather``'s ``(offset_dims, collapsed_slice_dims, start_index_map,
  slice_sizes, index_vector_dim)``."""
  scatter_dims: tuple | None = None
  """A ``scatter``'s ``(update_window_dims, inserted_window_dims,
  scatter_dims_to_operand_dims, index_vector_dim)``."""
  direction: str | None = None
  """A ``compare``'s direction (``LT``, ``EQ``...)."""
  tiled: bool = False
  """A parameter whose sharding splits it over the devices with no
  replication: each device holds different elements of it."""
  replicated: bool = False
  """A parameter whose sharding is ``{replicated}``: every device holds
  all of it."""
  op_type: str = ""
  """The ``op_type`` of its metadata (JAX writes the primitive's name
  there: ``io_callback``, ``pure_callback``...)."""
  host_transfer: bool = False
  """A ``send``, ``recv`` or their dones with ``is_host_transfer=true``:
  a transfer to or from the host (`host_callbacks`)."""
  rendezvous: str | None = None
  """A host transfer's ``_xla_host_transfer_rendezvous`` key, which pairs
  it with its peer on the host; None when it has none."""

  @property
  def dims(self) -> tuple[int, ...] | None:
    """The dimensions of an array result (``()`` for a scalar); None for a
    tuple or a shape that is not one array."""
    return dims_of(self.shape)

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


_ONE_ARRAY = re.compile(r"[a-z]+[0-9a-z]*\[([^\]]*)\](?:\{[^}]*\})?")


@functools.lru_cache(maxsize=4096)
def dims_of(shape: str) -> tuple[int, ...] | None:
  match = _ONE_ARRAY.fullmatch(shape)
  if match is None:
    return None
  text = match.group(1).replace("<=", "")
  try:
    return tuple(int(d) for d in text.split(",") if d.strip())
  except ValueError:
    return None


def scalar_literal(text: str | None) -> object:
  """A scalar constant's value (``0``, ``true``, ``1.5``); None for any
  other literal."""
  if text is None:
    return None
  text = text.strip()
  if text in ("true", "false"):
    return text == "true"
  try:
    return int(text)
  except ValueError:
    pass
  try:
    return float(text)
  except ValueError:
    return None


def uniform_literal(text: str | None) -> object:
  """A constant's value where every element has it: a scalar's, or an
  array literal's whose elements are all equal (``{0}``, ``{ {1, 1} }``);
  None otherwise."""
  if text is None or "{" not in text:
    return scalar_literal(text)
  words = {w for w in _LITERAL_SEPARATORS.split(text) if w}
  if len(words) != 1 or text.count("{") > 64:
    return None
  return scalar_literal(words.pop())


_LITERAL_SEPARATORS = re.compile(r"[{},\s]+")


def picked_branch(decision: object, branches: int) -> int | None:
  """The branch of `branches` that a conditional runs for a constant
  `decision`: branch 0 for a true predicate and 1 for a false one; for an
  index, that branch, or the last where it is out of range (as XLA does).
  None for any other value."""
  if isinstance(decision, bool):
    return 0 if decision else 1
  if isinstance(decision, int):
    return decision if 0 <= decision < branches else branches - 1
  return None


def line_error(number: int, line: str, why: str) -> ValueError:
  """A ValueError that says what is wrong with line `number`, and shows it."""
  shown = line.strip()
  if len(shown) > 160:
    shown = shown[:157] + "..."
  return ValueError(f"HLO text, line {number}: {why}: {shown!r}")


class InstructionReader:
  """Reads the instruction lines of one module.

  The attributes after the operands are read once per distinct text and
  opcode: the lines that one Python line made (in a loop, say) repeat the
  same target, metadata and stack frame, and a large program is mostly such
  lines.

  Args:
    stack_of: the Python stack of a ``stack_frame_id`` of this module.
  """

  def __init__(self, stack_of: Callable[[int], Stack]):
    self._stack_of = stack_of
    self._attributes: dict[tuple[str, str], dict[str, object]] = {}

  def read(self, line: str, number: int, computation: str) -> Instruction:
    """The instruction on one line.

    Args:
      line: the line, without leading or trailing whitespace.
      number: its 1-based line number, for errors.
      computation: the name of the computation it belongs to.
    """
    fast = _LINE.match(line)
    if fast is not None:
      shape = fast.group(3)
      opcode = fast.group(4)
      start = fast.end()
      root, name = fast.group(1), fast.group(2)
    else:
      head = _HEAD.match(line)
      if head is None:
        raise line_error(number, line, "expected `%name = shape opcode(...)`")
      shape_end = _shape_end(line, head.end(), number)
      opcode_match = _OPCODE.match(line, shape_end)
      if opcode_match is None:
        raise line_error(
          number, line, "expected an opcode and `(` after the shape"
        )
      opcode = opcode_match.group(1)
      start = opcode_match.end()
      shape = line[head.end() : shape_end]
      root, name = head.group(1), head.group(2)
    close = line.find(")", start) + 1
    if close == 0 or "(" in line[start:close]:  # Parentheses inside: count.
      close = _matching_paren(line, start - 1)
      if close < 0:
        raise line_error(number, line, "unbalanced parentheses in the operands")
    inside = line[start : close - 1]
    fields: dict[str, object] = {
      "name": name,
      "computation": computation,
      "opcode": opcode,
      "operands": ()
      if opcode in _NO_OPERANDS
      else _operand_names(inside, number, line),
      "shape": shape,
      "root": bool(root),
      "line": number,
    }
    if opcode == "constant":
      fields["literal"] = inside.strip()
    if opcode == "parameter":
      if not inside.strip().isdigit():
        raise line_error(number, line, "expected parameter(N)")
      fields["parameter_number"] = int(inside)
    attributes = self._attributes_of(opcode, line[close:])
    if opcode == "get-tuple-element" and "tuple_index" not in attributes:
      raise line_error(number, line, "a get-tuple-element needs `index=N`")
    return _new_instruction(fields, attributes)

  def _attributes_of(self, opcode: str, text: str) -> dict[str, object]:
    if opcode == "get-tuple-element" and (index := _LEADING_INDEX.match(text)):
      # The index apart, so that the rest is read once for all elements.
      rest = self._attributes_of(opcode, text[index.end() :])
      return {**rest, "tuple_index": int(index.group(1))}
    key = (opcode, text)
    if key not in self._attributes:
      self._attributes[key] = attribute_fields(opcode, text, self._stack_of)
    return self._attributes[key]


# Every field's default, for `_new_instruction`.
_DEFAULTS = {
  field.name: field.default
  for field in dataclasses.fields(Instruction)
  if field.default is not dataclasses.MISSING
}


def _new_instruction(
  fields: dict[str, object], more: dict[str, object]
) -> Instruction:
  """``Instruction(**fields, **more)``, built without the frozen dataclass's
  ``__init__``, which sets each of its 20 fields through
  ``object.__setattr__``: that took a third of the time of reading a line.
  Fields that neither gives keep their defaults."""
  found = _DEFAULTS.copy()
  found.update(fields)
  found.update(more)
  instruction = _new(Instruction)
  _set(instruction, "__dict__", found)
  return instruction


_new = object.__new__
_set = object.__setattr__


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
  if not text:
    return ()
  if text[0] == "%" and _PLAIN_PERCENT.fullmatch(text):
    return tuple(text[1:].split(", %"))
  if _PLAIN_BARE.fullmatch(text):
    return tuple(text.split(", "))
  if "%" in text:
    return _percent_operands(text, number, line)
  names = []
  for part in text.split(","):
    if not part.strip():
      continue
    bare = _BARE_OPERAND.fullmatch(part)
    if bare is None:
      raise line_error(number, line, f"cannot read operand {part.strip()!r}")
    names.append(bare.group(1))
  return tuple(names)


def _percent_operands(text: str, number: int, line: str) -> tuple[str, ...]:
  """The ``%name`` operands of `text`, refusing any part of it that is
  neither an operand, a comma, nor a shape before an operand: nothing
  that follows a name (``#x``, ``:1``) is passed over in silence."""
  names = []
  end = 0
  for found in _OPERAND.finditer(text):
    between = text[end : found.start()]
    ok = (
      "#" not in between and "%" not in between
      if not names
      else _BETWEEN.fullmatch(between) is not None
    )
    if not ok:
      raise line_error(
        number, line, f"cannot read the operands at {between.strip()!r}"
      )
    names.append(found.group(1))
    end = found.end()
  if text[end:].strip():
    raise line_error(
      number, line, f"cannot read the operands at {text[end:].strip()!r}"
    )
  return tuple(names)
