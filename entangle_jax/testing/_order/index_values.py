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
from entangle_jax.testing._order import folding
from entangle_jax.testing._order.module_index import ModuleIndex

_BITS = {"pred": 1, "s8": 8, "s16": 16, "s32": 32, "s64": 64}
"""The element types evaluated here (signed integers and ``pred``; an
unsigned type, whose compare and remainder differ, is not)."""

_SAMPLES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 100, -1, -2, -3, -8, 5000, -5000)
"""Values tried for the one unknown value (those its type holds). Small
ones, and two past a bound users write (``w < 1000``), none near the least
integer: a compiler may take ``abs(w)`` as never negative, as XLA does,
though ``abs`` of the least integer is negative, so a witness must not
rest on it, nor on any result that wraps (not evaluated; the samples
before one that wraps still count, each a value the unknown may hold)."""

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


_REDUCED = {
  "and": lambda a, b: a & b,
  "or": lambda a, b: a | b,
  "add": lambda a, b: a + b,
  "maximum": max,
  "minimum": min,
}
"""Combiners of a reduction of one element evaluated here (``jnp.all`` of
the in-bounds test ``jnp.take`` makes)."""


class _NotEvaluated(Exception):
  """The index's computation holds what is not evaluated here."""


def takes_two_starts(
  index: ModuleIndex,
  name: str,
  entry: str,
  low: int,
  high: int,
  chain: tuple[str, ...] = (),
) -> bool:
  """Whether instruction `name` (an index, clamped into ``[low, high]``
  as XLA clamps a start) surely takes two values there: computed from
  one unknown value (a native call's result, or a parameter of `entry`),
  two samples of which give two clamped values. `chain` is the place of
  `name`'s computation (`starts_taken`)."""
  return len(starts_taken(index, name, entry, low, high, chain)) > 1


def starts_taken(
  index: ModuleIndex,
  name: str,
  entry: str,
  low: int,
  high: int,
  chain: tuple[str, ...] = (),
) -> frozenset[int]:
  """The values instruction `name`, clamped into ``[low, high]``, surely
  takes: those the samples of its one unknown value give. Empty where it
  is not evaluated (no witness), one value where it may be pinned.

  `chain` names the ``call`` instructions that run `name`'s computation,
  outermost first (`MayOrder`'s place of it): a parameter of a jitted
  helper (``jnp.take`` is one) is then its caller's operand at that place,
  followed up the chain. Without it, such a parameter is not evaluated."""
  if high <= low:
    return frozenset()  # One start only: the index changes nothing.
  found = index.named(name)
  if found is None:
    return frozenset()
  starts: set[int] = set()
  try:
    unknown = _Evaluation(index, found.computation, entry, None)
    unknown.value(found, chain=chain)
    if len(unknown.leaves) != 1:
      return frozenset()
    ((leaf, _),) = unknown.leaves
    bits = _bits(index.named(leaf))
    for sample in _SAMPLES:
      if not _holds(sample, bits):
        continue
      run = _Evaluation(index, found.computation, entry, sample)
      starts.add(min(max(run.value(found, chain=chain), low), high))
  except _NotEvaluated:
    # A later sample that wraps (or an op not evaluated) leaves what the
    # samples before it gave: each of those values is taken for sure.
    return frozenset(starts)
  return frozenset(starts)


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
    self.leaves: set[tuple[str, tuple]] = set()
    self.memo: dict[tuple, int] = {}
    self.steps = 0

  def value(
    self,
    i: Instruction,
    arguments: tuple[int, ...] | None = None,
    chain: tuple[str, ...] | None = None,
  ):
    """`i`'s value: in a callee given `arguments`, or at the place
    `chain` (None: `i`'s computation alone, its parameters unknown). Each
    is worked out once: a helper's result used twice (``jnp.remainder``'s
    ``where``) is not evaluated again."""
    memo = (i.name, arguments, chain)
    if memo in self.memo:
      return self.memo[memo]
    found = self.memo[memo] = self._value(i, arguments, chain)
    return found

  def _value(
    self,
    i: Instruction,
    arguments: tuple[int, ...] | None,
    chain: tuple[str, ...] | None,
  ):
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
        return self._unknown(i, bits, ())
      caller = self._caller(i, chain)
      if caller is not None and i.parameter_number is not None:
        # A helper's parameter, at this place: its caller's operand.
        operand = self._operand(caller, i.parameter_number)
        return self.value(operand, None, chain[:-1] if chain else None)
      raise _NotEvaluated  # A loop's state or a branch's operand.
    if opcode == "custom-call":
      if i.target == ENTANGLE_TARGET and i.operands:
        return self.value(self._operand(i, 0), arguments, chain)
      if arguments is not None:
        raise _NotEvaluated  # A call in a helper: one per place.
      if chain is None and i.computation != self.home:
        raise _NotEvaluated
      # One call at one place: the place tells it from its twins.
      return self._unknown(i, bits, chain or ())
    if opcode == "reduce" and len(i.operands) == 2 and i.callees:
      # Of one element (`_operand`): the combiner on the start and it.
      combiner = folding.combiner(self.index.computation(i.callees[0]))
      if combiner not in _REDUCED:
        raise _NotEvaluated
      values = [
        self.value(self._operand(i, k), arguments, chain) for k in range(2)
      ]
      return _fit(_REDUCED[combiner](values[1], values[0]), bits)
    if opcode == "call" and i.callees:
      inner = tuple(
        self.value(self._operand(i, k), arguments, chain)
        for k in range(len(i.operands))
      )
      roots = self.index.roots(i.callees[0])
      root = self.index.named(roots[0]) if roots else None
      if root is None:
        raise _NotEvaluated
      return self.value(root, inner)
    values = [
      self.value(self._operand(i, k), arguments, chain)
      for k in range(len(i.operands))
    ]
    return _fit(_apply(i, values, bits), bits)

  def _caller(
    self, i: Instruction, chain: tuple[str, ...] | None
  ) -> Instruction | None:
    """The ``call`` that runs parameter `i`'s computation at the place
    `chain`, where the chain's last instruction is one; None otherwise (a
    loop or a conditional, whose operand differs from trip to trip or is
    not known to be taken)."""
    if not chain:
      return None
    caller = self.index.named(chain[-1])
    if (
      caller is None
      or caller.opcode != "call"
      or not caller.callees
      or caller.callees[0] != i.computation
    ):
      return None
    return caller

  def _operand(self, i: Instruction, k: int) -> Instruction:
    found = self.index.named(i.operands[k])
    if found is None or found.dims is None or _elements(found) != 1:
      raise _NotEvaluated  # Only one-element values are evaluated.
    return found

  def _unknown(self, i: Instruction, bits: int, place: tuple) -> int:
    self.leaves.add((i.name, place))
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
