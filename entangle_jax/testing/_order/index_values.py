"""Whether an index surely picks two different elements: the witness that
no compiler may drop it.

XLA drops an index that cannot change what it picks: a constant, or one
that its clamp into the array pins to one start (an HLO start of
``min(abs(w), 0)`` picks the first element whatever ``w`` is, and of
``max(w, 5)`` the last of three). Which values an index can take is a
compiler's own range analysis, and the next one may know more than this
one. So an index orders only where it surely takes two starts: it is
computed, by integer ops evaluated here exactly, from one value no
compiler can know (a native call's result, or an entry parameter), and
two small samples of that value give two starts once clamped, with no
result on the way that wraps. Any op not evaluated here, a second such
value, one whose values are bounded (a loop's state, a helper's
parameter), or a result that wraps, and no witness is found: the index
orders nothing, as before.
"""

from __future__ import annotations

from entangle_jax._src.targets.names import ENTANGLE_TARGET
from entangle_jax.testing._hlo import Instruction
from entangle_jax.testing._hlo.instruction import uniform_literal
from entangle_jax.testing._order.module_index import ModuleIndex

_BITS = {"pred": 1, "s8": 8, "s16": 16, "s32": 32, "s64": 64}
"""The element types evaluated here (signed integers and ``pred``; an
unsigned type, whose compare and remainder differ, is not)."""

_SAMPLES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 100, -1, -2, -3, -8)
"""Values tried for the one unknown value (those its type holds). Small
ones only: a compiler may take ``abs(w)`` as never negative, as XLA does,
though ``abs`` of the least integer is negative, so a witness must not
rest on it, nor on any result that wraps (not evaluated)."""

_BUDGET = 400
"""The most instructions one evaluation visits: a longer index
computation is not evaluated (no witness)."""

_COMPARE = {
  "EQ": lambda a, b: a == b,
  "NE": lambda a, b: a != b,
  "LT": lambda a, b: a < b,
  "LE": lambda a, b: a <= b,
  "GT": lambda a, b: a > b,
  "GE": lambda a, b: a >= b,
}


class _NotEvaluated(Exception):
  """The index's computation holds what is not evaluated here."""


def takes_two_starts(
  index: ModuleIndex, name: str, entry: str, low: int, high: int
) -> bool:
  """Whether instruction `name` (an index, clamped into ``[low, high]``
  as XLA clamps a start) surely takes two values there: computed from
  one unknown value (a native call's result in its own computation, or a
  parameter of `entry`), two samples of which give two clamped values."""
  if high <= low:
    return False  # One start only: the index changes nothing.
  found = index.named(name)
  if found is None:
    return False
  try:
    unknown = _Evaluation(index, found.computation, entry, None)
    unknown.value(found)
    if len(unknown.leaves) != 1:
      return False
    (leaf,) = unknown.leaves
    bits = _bits(index.named(leaf))
    starts = set()
    for sample in _SAMPLES:
      if not _holds(sample, bits):
        continue
      run = _Evaluation(index, found.computation, entry, sample)
      starts.add(min(max(run.value(found), low), high))
      if len(starts) > 1:
        return True
  except _NotEvaluated:
    return False
  return False


class _Evaluation:
  """One evaluation of an index, with `sample` for its unknown value
  (None: the first pass, which finds the unknown values)."""

  def __init__(
    self, index: ModuleIndex, home: str, entry: str, sample: int | None
  ):
    self.index = index
    self.home = home
    self.entry = entry
    self.sample = sample
    self.leaves: set[str] = set()
    self.steps = 0

  def value(self, i: Instruction, arguments: tuple[int, ...] | None = None):
    self.steps += 1
    if self.steps > _BUDGET:
      raise _NotEvaluated
    bits = _bits(i)
    opcode = i.opcode
    if opcode == "constant":
      lit = uniform_literal(i.literal)
      if isinstance(lit, bool):
        return int(lit)
      if not isinstance(lit, int):
        raise _NotEvaluated
      return _fit(lit, bits)
    if opcode == "parameter":
      if arguments is not None and i.parameter_number is not None:
        return arguments[i.parameter_number]
      if i.computation == self.entry:
        return self._unknown(i, bits)
      raise _NotEvaluated  # A loop's state or a branch's operand.
    if opcode == "custom-call":
      if i.target == ENTANGLE_TARGET and i.operands:
        return self.value(self._operand(i, 0), arguments)
      if i.computation != self.home or arguments is not None:
        raise _NotEvaluated  # A call in a helper: one per place.
      return self._unknown(i, bits)
    if opcode == "call" and i.callees:
      inner = tuple(
        self.value(self._operand(i, k), arguments)
        for k in range(len(i.operands))
      )
      roots = self.index.roots(i.callees[0])
      root = self.index.named(roots[0]) if roots else None
      if root is None:
        raise _NotEvaluated
      return self.value(root, inner)
    values = [
      self.value(self._operand(i, k), arguments) for k in range(len(i.operands))
    ]
    return _fit(_apply(i, values, bits), bits)

  def _operand(self, i: Instruction, k: int) -> Instruction:
    found = self.index.named(i.operands[k])
    if found is None or found.dims is None or _elements(found) != 1:
      raise _NotEvaluated  # Only one-element values are evaluated.
    return found

  def _unknown(self, i: Instruction, bits: int) -> int:
    self.leaves.add(i.name)
    return 0 if self.sample is None else _fit(self.sample, bits)


def _apply(i: Instruction, values: list[int], bits: int) -> int:
  """`i` of one-element `values`, exactly; `_NotEvaluated` for an op this
  does not evaluate."""
  opcode = i.opcode
  if opcode in ("reshape", "bitcast", "copy", "broadcast") and len(values) == 1:
    return values[0]
  if opcode == "convert" and len(values) == 1:
    return int(values[0] != 0) if bits == 1 else values[0]  # Else held.
  if opcode == "abs" and len(values) == 1:
    return abs(values[0])
  if opcode == "negate" and len(values) == 1:
    return -values[0]
  if opcode == "not" and len(values) == 1:
    return 1 - values[0] if bits == 1 else ~values[0]
  if opcode == "select" and len(values) == 3:
    return values[1] if values[0] else values[2]
  if opcode == "clamp" and len(values) == 3:
    return min(max(values[1], values[0]), values[2])
  if len(values) != 2:
    raise _NotEvaluated
  a, b = values
  if opcode == "compare" and i.direction in _COMPARE:
    return int(_COMPARE[i.direction](a, b))
  if opcode == "add":
    return a + b
  if opcode == "subtract":
    return a - b
  if opcode == "multiply":
    return a * b
  if opcode == "maximum":
    return max(a, b)
  if opcode == "minimum":
    return min(a, b)
  if opcode == "and":
    return a & b
  if opcode == "or":
    return a | b
  if opcode == "xor":
    return a ^ b
  if opcode == "remainder":
    if b == 0:
      raise _NotEvaluated  # What a remainder by 0 gives is the backend's.
    # The sign of the dividend, as C's ``%``.
    return abs(a) % abs(b) * (-1 if a < 0 else 1)
  raise _NotEvaluated


def _bits(i: Instruction | None) -> int:
  if i is None:
    raise _NotEvaluated
  element = i.shape.split("[", 1)[0].strip()
  if element not in _BITS:
    raise _NotEvaluated
  return _BITS[element]


def _elements(i: Instruction) -> int:
  count = 1
  for d in i.dims or ():
    count *= d
  return count


def _holds(value: int, bits: int) -> bool:
  """Whether a signed integer of `bits` (``pred``: 0 or 1) holds `value`."""
  if bits == 1:
    return value in (0, 1)
  return -(1 << (bits - 1)) <= value < 1 << (bits - 1)


def _fit(value: int, bits: int) -> int:
  """`value`, where its type holds it; `_NotEvaluated` where it would
  wrap (what a compiler believes of a wrapped value is its own)."""
  if not _holds(value, bits):
    raise _NotEvaluated
  return value
